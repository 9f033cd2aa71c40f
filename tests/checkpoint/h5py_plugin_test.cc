// h5py (Debian's python3-h5py, run by /usr/bin/python3, not whatever python3
// comes first on PATH) reads dgrr checkpoints' zstd-compressed datasets
// through the plugin library, byte for byte; without the plugin it cannot.
// A missing h5py fails these tests (scripts/install-deps.sh installs it).
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "base/file.h"
#include "checkpoint/checkpoint_file.h"

namespace dgrr::checkpoint {
namespace {

namespace fs = std::filesystem;

constexpr const char* kSystemPython = "/usr/bin/python3";
const std::string kScript = std::string(DGRR_SOURCE_DIR) + "/tests/checkpoint/h5py_read.py";

class H5pyPluginTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = fs::temp_directory_path() /
           ("dgrr_h5py_" + std::to_string(::getpid()) + "_" + info->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_ / "dump");
    fs::create_directories(dir_ / "no-plugins");
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string Path(const std::string& name) const { return (dir_ / name).string(); }

  struct Result {
    int rc = -1;
    std::string out, err;
  };
  // Runs the h5py reader on `checkpoint` with HDF5_PLUGIN_PATH=plugin_dir.
  Result ReadWithH5py(const std::string& checkpoint, const std::string& plugin_dir) {
    const std::string cmd = "HDF5_PLUGIN_PATH='" + plugin_dir + "' " + kSystemPython + " '" +
                            kScript + "' '" + checkpoint + "' '" + Path("dump") + "' > '" +
                            Path("out.txt") + "' 2> '" + Path("err.txt") + "'";
    return Run(cmd);
  }
  Result Run(const std::string& cmd) {
    Result r;
    const int status = std::system(cmd.c_str());
    r.rc = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    r.out = ReadOrEmpty(Path("out.txt"));
    r.err = ReadOrEmpty(Path("err.txt"));
    return r;
  }
  std::string Dumped(const std::string& dataset) {
    std::string name = dataset.substr(1);
    for (char& c : name) c = c == '/' ? '%' : c;
    auto bytes = ReadFileToString(Path("dump/" + name + ".bin"));
    return bytes.ok() ? *bytes : "(not dumped)";
  }
  static std::string ReadOrEmpty(const std::string& path) {
    auto bytes = ReadFileToString(path);
    return bytes.ok() ? *bytes : "";
  }
  template <typename T>
  static std::string Bytes(const std::vector<T>& v) {
    return std::string(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(T));
  }
  // Fails the test with the reason when the system python has no h5py.
  static void ExpectH5pyPresent(const Result& r) {
    ASSERT_NE(r.rc, 3) << "python3-h5py is not installed for " << kSystemPython
                       << " (scripts/install-deps.sh installs it): " << r.err;
    ASSERT_NE(r.rc, 127) << kSystemPython << " not found: " << r.err;
  }

  fs::path dir_;
};

// Two ranks: replicated float weights and per-rank counters, all compressible,
// so every dataset goes through the zstd filter.
class TwoRankState {
 public:
  TwoRankState() : weights_(4096), cursors_{std::vector<int32_t>(1000), std::vector<int32_t>(1000)} {
    for (size_t i = 0; i < weights_.size(); ++i) weights_[i] = static_cast<float>(i % 64) * 0.5f;
    for (int r = 0; r < 2; ++r) {
      for (int i = 0; i < 1000; ++i) cursors_[r][i] = 1000 * (r + 1) + i % 50;
      EXPECT_TRUE(registries_[r].Register({"weights", weights_.data(), weights_.size() * 4,
                                           DType::kF32, {4096}, StateRole::kParameter,
                                           RestorePolicy::kCheckpoint, true}).ok());
      EXPECT_TRUE(registries_[r].Register({"cursor", cursors_[r].data(), 4000, DType::kI32,
                                           {1000}, StateRole::kCounter,
                                           RestorePolicy::kCheckpoint, false}).ok());
    }
  }
  Status Write(const std::string& path) {
    CheckpointMeta meta;
    meta.step = 7;
    meta.config_digest = 1;
    meta.run_id_hex = "00112233445566778899aabbccddeeff";
    meta.world_size = 2;
    meta.plan_json = "{}";
    return WriteCheckpoint(path, meta, {{0, &registries_[0], 10}, {1, &registries_[1], 12}});
  }
  const std::vector<float>& weights() const { return weights_; }
  const std::vector<int32_t>& cursor(int rank) const { return cursors_[rank]; }

 private:
  std::vector<float> weights_;
  std::vector<int32_t> cursors_[2];
  StateRegistry registries_[2];
};

TEST_F(H5pyPluginTest, ReadsEveryCompressedDatasetByteForByteThroughThePlugin) {
  TwoRankState state;
  const std::string path = Path("step-7.h5");
  ASSERT_TRUE(state.Write(path).ok());
  const Result r = ReadWithH5py(path, DGRR_HDF5_PLUGIN_DIR);
  ExpectH5pyPresent(r);
  ASSERT_EQ(r.rc, 0) << r.out << r.err;
  // The pipeline h5py reports names the zstd filter on the state datasets.
  EXPECT_NE(r.out.find("/replicated/weights 32015 16384"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("/ranks/0/cursor 32015 4000"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("/ranks/1/cursor 32015 4000"), std::string::npos) << r.out;
  EXPECT_TRUE(Dumped("/replicated/weights") == Bytes(state.weights()));
  EXPECT_TRUE(Dumped("/ranks/0/cursor") == Bytes(state.cursor(0)));
  EXPECT_TRUE(Dumped("/ranks/1/cursor") == Bytes(state.cursor(1)));
}

// The control: the same file with a plugin path that holds no plugin. h5py
// must fail to read (so the test above really exercises the plugin).
TEST_F(H5pyPluginTest, WithoutThePluginH5pyCannotReadTheCompressedData) {
  TwoRankState state;
  const std::string path = Path("step-7.h5");
  ASSERT_TRUE(state.Write(path).ok());
  const Result r = ReadWithH5py(path, Path("no-plugins"));
  ExpectH5pyPresent(r);
  EXPECT_EQ(r.rc, 2) << r.out << r.err;
  EXPECT_NE(r.err.find("cannot read /"), std::string::npos) << r.err;
}

#ifdef DGRR_CLI_BINARY
// A checkpoint the real `dgrr train` wrote (v2: manifests and shards): every
// dataset h5py finds reads through the plugin, and the manifest really needs it.
TEST_F(H5pyPluginTest, ReadsACheckpointThatDgrrTrainWrote) {
  const std::string run = Path("run");
  Result t = Run(std::string("'") + DGRR_CLI_BINARY + "' train --model tiny --steps 2 --ckpt-every 1 --out '" +
                 run + "' --quiet > '" + Path("out.txt") + "' 2> '" + Path("err.txt") + "'");
  ASSERT_EQ(t.rc, 0) << t.err;
  std::vector<std::string> checkpoints;
  for (const auto& e : fs::directory_iterator(run + "/ckpt")) {
    if (e.path().extension() == ".h5") checkpoints.push_back(e.path().string());
  }
  ASSERT_FALSE(checkpoints.empty());
  for (const std::string& ckpt : checkpoints) {
    const Result r = ReadWithH5py(ckpt, DGRR_HDF5_PLUGIN_DIR);
    ExpectH5pyPresent(r);
    EXPECT_EQ(r.rc, 0) << ckpt << ": " << r.out << r.err;
    EXPECT_NE(r.out.find(" 32015 "), std::string::npos) << r.out;
    // Chunks zstd cannot shrink (random-looking weights) are stored raw, so a
    // shard may read without the plugin; the manifest's plan JSON is
    // compressed, so without the plugin reading it fails.
    if (ckpt.find(".rank-") != std::string::npos) continue;
    const Result without = ReadWithH5py(ckpt, Path("no-plugins"));
    EXPECT_EQ(without.rc, 2) << ckpt << ": " << without.out << without.err;
  }
}
#endif

}  // namespace
}  // namespace dgrr::checkpoint
