#include "rng/philox_stream.h"

#include "rng/philox_fill.h"

namespace dgrr::rng {

void PhiloxStream::FillOnHost(uint32_t* out, size_t n) {
  // Lanes left in a partly consumed block, then whole blocks in bulk, then
  // the first lanes of the last block: the same draws NextU32 would return.
  while (n > 0 && (position_ & 3) != 0) {
    *out++ = NextU32();
    --n;
  }
  // The bulk kernels address blocks below 2^62 only; past the last position
  // the stream wraps to 0, which NextU32 handles, so stop the bulk part there.
  const uint64_t blocks_before_wrap = (uint64_t{1} << 62) - (position_ >> 2);
  const size_t whole_blocks =
      static_cast<size_t>(n / 4 < blocks_before_wrap ? n / 4 : blocks_before_wrap);
  PhiloxFillBlocks(key_, subsequence_, position_ >> 2, whole_blocks, out);
  position_ += 4 * static_cast<uint64_t>(whole_blocks);
  out += 4 * whole_blocks;
  n -= 4 * whole_blocks;
  while (n > 0) {
    *out++ = NextU32();
    --n;
  }
}

}  // namespace dgrr::rng
