// The zstd HDF5 filter (id 32015) against the decode vectors in
// tests/data/hdf5_zstd.txt (frames written by h5py/hdf5plugin and by the HDF
// Group's filter), and its forward path.
#include "checkpoint/zstd_filter.h"

#include <gtest/gtest.h>

#include <cstring>
#include <fstream>
#include <string>
#include <vector>

namespace dgrr::checkpoint {
namespace {

// The hex frame of vector `label` ("[A]", "[B]") from the vectors file.
std::vector<uint8_t> VectorFrame(const std::string& label) {
  std::ifstream in(std::string(DGRR_TEST_DATA_DIR) + "/hdf5_zstd.txt");
  std::string line;
  bool in_vector = false;
  while (std::getline(in, line)) {
    if (line.rfind(label, 0) == 0) in_vector = true;
    const size_t at = line.find("hex: ");
    if (in_vector && at != std::string::npos) {
      const std::string hex = line.substr(at + 5);
      std::vector<uint8_t> out;
      for (size_t i = 0; i + 1 < hex.size(); i += 2) {
        out.push_back(static_cast<uint8_t>(std::stoul(hex.substr(i, 2), nullptr, 16)));
      }
      return out;
    }
  }
  return {};
}

// Runs the filter the way HDF5 does: the chunk in an H5allocate_memory buffer.
std::vector<uint8_t> RunFilter(unsigned flags, const std::vector<unsigned>& cd,
                               const std::vector<uint8_t>& input, size_t* result) {
  size_t buf_size = input.size();
  void* buf = H5allocate_memory(buf_size, false);
  std::memcpy(buf, input.data(), input.size());
  *result = kZstdFilterClass.filter(flags, cd.size(), cd.data(), input.size(), &buf_size, &buf);
  std::vector<uint8_t> out(static_cast<uint8_t*>(buf), static_cast<uint8_t*>(buf) + *result);
  H5free_memory(buf);
  return out;
}

TEST(ZstdFilter, DecodesH5pyVectorA) {
  const std::vector<uint8_t> frame = VectorFrame("[A]");
  ASSERT_EQ(frame.size(), 174u);
  size_t n = 0;
  const std::vector<uint8_t> out = RunFilter(H5Z_FLAG_REVERSE, {}, frame, &n);
  ASSERT_EQ(n, 400u);
  for (int32_t i = 0; i < 100; ++i) {
    int32_t v;
    std::memcpy(&v, out.data() + 4 * i, 4);
    ASSERT_EQ(v, i);
  }
}

TEST(ZstdFilter, DecodesHdfGroupVectorB) {
  const std::vector<uint8_t> frame = VectorFrame("[B]");
  ASSERT_EQ(frame.size(), 315u);
  size_t n = 0;
  const std::vector<uint8_t> out = RunFilter(H5Z_FLAG_REVERSE, {5}, frame, &n);
  ASSERT_EQ(n, 524288u);
  for (size_t k = 0; k < out.size(); ++k) ASSERT_EQ(out[k], k & 0xFF) << k;
}

TEST(ZstdFilter, RoundTripsAtFastAndDefaultLevels) {
  std::vector<uint8_t> data(100000);
  for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<uint8_t>((i * 7) % 251);
  for (unsigned level : {1u, 3u, static_cast<unsigned>(-3)}) {
    size_t n = 0;
    const std::vector<uint8_t> frame = RunFilter(0, {level}, data, &n);
    ASSERT_GT(n, 0u);
    ASSERT_LT(n, data.size());
    EXPECT_EQ(0, std::memcmp(frame.data(), "\x28\xb5\x2f\xfd", 4)) << "one zstd frame";
    const std::vector<uint8_t> back = RunFilter(H5Z_FLAG_REVERSE, {}, frame, &n);
    EXPECT_EQ(back, data) << "level " << static_cast<int>(level);
  }
}

TEST(ZstdFilter, RefusesDamagedFrames) {
  std::vector<uint8_t> frame = VectorFrame("[A]");
  ASSERT_FALSE(frame.empty());
  size_t n = 1;
  std::vector<uint8_t> bad_magic = frame;
  bad_magic[0] ^= 0xFF;
  RunFilter(H5Z_FLAG_REVERSE, {}, bad_magic, &n);
  EXPECT_EQ(n, 0u);
  std::vector<uint8_t> cut(frame.begin(), frame.begin() + frame.size() / 2);
  RunFilter(H5Z_FLAG_REVERSE, {}, cut, &n);
  EXPECT_EQ(n, 0u);
  EXPECT_EQ(ClampZstdLevel(1000), 22);
  EXPECT_EQ(ClampZstdLevel(0), 0);
}

}  // namespace
}  // namespace dgrr::checkpoint
