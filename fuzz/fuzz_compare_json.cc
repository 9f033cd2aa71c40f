// libFuzzer target: compare's key-by-key JSON diff (replay/compare.h) of two
// documents, as config.json and as rank<R>.env.json (EnvironmentForDiff first).
// The input holds both, split at its first NUL byte (no NUL: the document is
// compared with itself, which must give no difference).
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include <nlohmann/json.hpp>

#include "fuzz/scratch.h"
#include "replay/compare.h"

namespace {

using nlohmann::json;

// As compare reads a JSON file: no exceptions, a discarded value is an error.
bool Parse(std::string_view text, json* out) {
  *out = json::parse(text, nullptr, /*allow_exceptions=*/false);
  return !out->is_discarded();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view input = dgrr::fuzz::AsView(data, size);
  const size_t nul = input.find('\0');
  const bool same = nul == std::string_view::npos;
  const std::string_view text_a = same ? input : input.substr(0, nul);
  const std::string_view text_b = same ? input : input.substr(nul + 1);
  json a, b;
  if (!Parse(text_a, &a) || !Parse(text_b, &b)) return 0;
  const auto config_diffs = dgrr::replay::DiffJson(a, b);
  if (same && !config_diffs.empty()) std::abort();
  const json env_a = dgrr::replay::EnvironmentForDiff(a);
  const json env_b = dgrr::replay::EnvironmentForDiff(b);
  (void)dgrr::replay::DiffJson(env_a, env_b);
  return 0;
}
