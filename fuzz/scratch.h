// Scratch files for fuzz targets whose reader takes a path.
//
// Each fuzzing process gets its own directory (in /dev/shm when it is
// writable, else $TMPDIR or /tmp), removed at exit; inputs are written there
// with one write(2) and read back by the code under test. Kept apart from the
// targets so a reader that gains an in-memory source needs no scratch file.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace dgrr::fuzz {

// The process's scratch directory, created on first use.
const std::string& ScratchDir();

// Writes `bytes` to ScratchDir()/name (replacing it) and returns the path.
// Aborts when the scratch directory cannot be written: that is the fuzzing
// machine's fault, and a fuzzer that silently tests nothing is worse.
std::string WriteScratchFile(const std::string& name, std::string_view bytes);

inline std::string_view AsView(const uint8_t* data, size_t size) {
  return {reinterpret_cast<const char*>(data), size};
}

}  // namespace dgrr::fuzz
