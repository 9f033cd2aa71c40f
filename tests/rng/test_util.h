// Helpers shared by the rng tests: reading the vector files in tests/data.
#pragma once

#include <fstream>
#include <sstream>
#include <string>
#include <vector>

namespace dgrr::rng::testing {

inline std::vector<std::string> ReadLines(const std::string& name) {
  std::ifstream in(std::string(DGRR_TEST_DATA_DIR) + "/" + name);
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

inline uint64_t ParseHex(const std::string& text) { return std::stoull(text, nullptr, 16); }

}  // namespace dgrr::rng::testing
