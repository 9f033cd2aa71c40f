// Makes a mutated checkpoint or tensor dump pass its header check, so that
// the fuzzer reaches libhdf5 and dgrr's HDF5 readers behind it.
//
// Both formats put a 512-byte header before the HDF5 superblock whose hash of
// the whole payload is checked first (docs/checkpoint-format.md section 1,
// docs/tensor-dump.md section 2): a random mutation of the payload is caught
// there and never parsed. These functions rewrite the fixed header fields and
// recompute the length and both hashes over the bytes as they are, the way a
// writer would have stamped them. The layouts are the documented ones; a
// format change that moves a field must update them (the seeds would then
// stop getting past the header, which the coverage figures show).
#pragma once

#include <string>

namespace dgrr::fuzz {

constexpr size_t kUserBlockBytes = 512;

// False when `file` is too short to hold a header (nothing to restamp).
bool RestampCheckpoint(std::string& file);
bool RestampTensorDump(std::string& file);

}  // namespace dgrr::fuzz
