#include "fuzz/restamp.h"

#include <xxhash.h>

#include <algorithm>
#include <cstdint>
#include <cstring>

namespace dgrr::fuzz {
namespace {

void Put32(std::string& s, size_t off, uint32_t v) {
  for (int i = 0; i < 4; ++i) s[off + i] = static_cast<char>(v >> (8 * i));
}
void Put64(std::string& s, size_t off, uint64_t v) {
  for (int i = 0; i < 8; ++i) s[off + i] = static_cast<char>(v >> (8 * i));
}
uint64_t Hash(const std::string& s, size_t from, size_t to) { return XXH3_64bits(s.data() + from, to - from); }

}  // namespace

// docs/checkpoint-format.md section 1: magic 0, version 8, header_bytes 12,
// user_block_bytes 16, file_length 24, payload_xxh3 32, step 40,
// state_digest 48 (kept as mutated), header_xxh3 56 over [0, 56), zeros from 64.
bool RestampCheckpoint(std::string& file) {
  if (file.size() < kUserBlockBytes) return false;
  std::memcpy(file.data(), "DGRRCKPT", 8);
  Put32(file, 8, 1);
  Put32(file, 12, 64);
  Put64(file, 16, kUserBlockBytes);
  Put64(file, 24, file.size());
  Put64(file, 32, Hash(file, kUserBlockBytes, file.size()));
  std::fill(file.begin() + 64, file.begin() + kUserBlockBytes, '\0');
  Put64(file, 56, Hash(file, 0, 56));
  return true;
}

// docs/tensor-dump.md section 2: magic 0, version 8, header_bytes 12,
// file_length 16, payload_xxh3 24, header_xxh3 32 over [0, 32), zeros from 40.
bool RestampTensorDump(std::string& file) {
  if (file.size() < kUserBlockBytes) return false;
  std::memcpy(file.data(), "DGRRDUMP", 8);
  Put32(file, 8, 1);
  Put32(file, 12, 40);
  Put64(file, 16, file.size());
  Put64(file, 24, Hash(file, kUserBlockBytes, file.size()));
  std::fill(file.begin() + 40, file.begin() + kUserBlockBytes, '\0');
  Put64(file, 32, Hash(file, 0, 32));
  return true;
}

}  // namespace dgrr::fuzz
