#include "rng/draw_set.h"
#include "rng/distributions.h"

namespace dgrr::rng {

DrawSet DrawOnHost(const std::vector<PhiloxStream>& streams, size_t per_stream,
                   uint64_t threshold) {
  const size_t total = streams.size() * per_stream;
  DrawSet set{std::vector<uint32_t>(total), std::vector<float>(total),
              std::vector<double>(total),   std::vector<float>(total),
              std::vector<double>(total),   std::vector<uint8_t>(total)};
  for (size_t i = 0; i < streams.size(); ++i) {
    const size_t at = i * per_stream;
    PhiloxStream s = streams[i];
    s.Fill(set.u32.data() + at, per_stream);
    s = streams[i];
    FillUniformFloat(s, set.uniform_float.data() + at, per_stream);
    s = streams[i];
    FillUniformDouble(s, set.uniform_double.data() + at, per_stream);
    s = streams[i];
    FillNormalFloat(s, set.normal_float.data() + at, per_stream);
    s = streams[i];
    FillNormalDouble(s, set.normal_double.data() + at, per_stream);
    s = streams[i];
    FillBernoulliMask(s, set.mask.data() + at, per_stream, threshold);
  }
  return set;
}

}  // namespace dgrr::rng
