#include "base/coding.h"

#include <cstdio>

namespace dgrr {

std::string Hex64(uint64_t v) {
  char buf[19];
  std::snprintf(buf, sizeof buf, "0x%016llx", static_cast<unsigned long long>(v));
  return buf;
}

std::string Hex32(uint32_t v) {
  char buf[11];
  std::snprintf(buf, sizeof buf, "0x%08x", v);
  return buf;
}

}  // namespace dgrr
