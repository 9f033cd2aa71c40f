// The NCCL communicator: refusals that need no device run everywhere NCCL is
// built; the collectives on device buffers run on a GPU (one rank, bootstrap
// by an id file) and must move exactly the bytes the in-process communicator
// moves. Skips, saying why, without CUDA or without a device.
#include <gtest/gtest.h>

#include <numeric>
#include <vector>

#include "runtime/inprocess_communicator.h"
#include "tests/support/temp_dir_test.h"

#if DGRR_HAVE_NCCL
#include <cuda_runtime.h>

#include "tests/support/cuda_device.h"

#include "runtime/nccl_communicator.h"
#endif

namespace dgrr {
namespace {

#if DGRR_HAVE_NCCL

class NcclCommunicatorTest : public ::dgrr::test_support::TempDirTest {
 protected:
  NcclOptions OneRank() {
    NcclOptions o;
    o.id_file = (dir_ / "nccl-id").string();
    return o;
  }
};

TEST_F(NcclCommunicatorTest, BadOptionsAreRefusedBeforeAnyDeviceIsTouched) {
  NcclOptions o = OneRank();
  o.rank = 1;
  EXPECT_TRUE(OpenNcclCommunicator(o).status().IsInvalidArgument());
  o = OneRank();
  o.id_file.clear();
  EXPECT_TRUE(OpenNcclCommunicator(o).status().IsInvalidArgument()) << "no way to share the id";
  InProcessGroup group(1);
  o = OneRank();
  o.bootstrap = group.ranks[0].get();
  EXPECT_TRUE(OpenNcclCommunicator(o).status().IsInvalidArgument()) << "two ways to share the id";
  o = OneRank();
  o.device = -1;
  EXPECT_TRUE(OpenNcclCommunicator(o).status().IsInvalidArgument());
}

TEST_F(NcclCommunicatorTest, WithoutTheDeviceItSaysWhich) {
  std::string why;
  if (test_support::HaveCudaDevice(&why)) GTEST_SKIP() << "a CUDA device is present: this checks the refusal without one";
  auto c = OpenNcclCommunicator(OneRank());
  EXPECT_EQ(c.status().code(), StatusCode::kFailedPrecondition) << c.status().ToString();
  EXPECT_NE(c.status().ToString().find("device 0"), std::string::npos) << c.status().ToString();
}

// Device buffer with host bytes in and out.
class DeviceBytes {
 public:
  explicit DeviceBytes(const std::vector<uint8_t>& host) : size_(host.size()) {
    EXPECT_EQ(cudaMalloc(&data_, size_ + 1), cudaSuccess);
    if (size_ > 0) {
      EXPECT_EQ(cudaMemcpy(data_, host.data(), size_, cudaMemcpyHostToDevice), cudaSuccess);
    }
  }
  ~DeviceBytes() { cudaFree(data_); }
  DeviceBytes(const DeviceBytes&) = delete;
  DeviceBytes& operator=(const DeviceBytes&) = delete;
  void* data() { return data_; }
  std::vector<uint8_t> Read() const {
    std::vector<uint8_t> out(size_);
    if (size_ > 0) {
      EXPECT_EQ(cudaMemcpy(out.data(), data_, size_, cudaMemcpyDeviceToHost), cudaSuccess);
    }
    return out;
  }

 private:
  void* data_ = nullptr;
  size_t size_ = 0;
};

std::vector<uint8_t> Pattern(size_t n, uint8_t seed) {
  std::vector<uint8_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<uint8_t>(seed + i * 31);
  return v;
}

TEST_F(NcclCommunicatorTest, OneRankMovesTheBytesTheInProcessCommunicatorMoves) {
  DGRR_SKIP_WITHOUT_CUDA_DEVICE();
  auto nccl = OpenNcclCommunicator(OneRank());
  ASSERT_TRUE(nccl.ok()) << nccl.status().ToString();
  InProcessGroup group(1);
  Communicator& host = *group.ranks[0];
  cudaStream_t stream;
  ASSERT_EQ(cudaStreamCreate(&stream), cudaSuccess);
  const Placement on_device = Placement::Cuda(0, stream);

  // Broadcast, AllGather, AllGatherV, AllToAllV: same inputs, same outputs.
  const std::vector<uint8_t> in = Pattern(1000, 7);
  std::vector<uint8_t> host_out(1000 + 16, 0);
  DeviceBytes dev_in(in);
  DeviceBytes dev_out(std::vector<uint8_t>(host_out.size(), 0));

  std::vector<uint8_t> host_bcast = in;
  ASSERT_TRUE(host.Broadcast(host_bcast.data(), host_bcast.size(), 0).ok());
  ASSERT_TRUE((*nccl)->Broadcast(dev_in.data(), in.size(), 0, on_device).ok());

  ASSERT_TRUE(host.AllGather(in.data(), in.size(), host_out.data()).ok());
  ASSERT_TRUE((*nccl)->AllGather(dev_in.data(), in.size(), dev_out.data(), on_device).ok());
  ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
  EXPECT_EQ(dev_in.Read(), host_bcast);
  EXPECT_EQ(dev_out.Read(), host_out);

  const size_t counts[] = {777};
  ASSERT_TRUE(host.AllGatherV(in.data(), counts, host_out.data() + 3).ok());
  ASSERT_TRUE((*nccl)->AllGatherV(dev_in.data(), counts, static_cast<char*>(dev_out.data()) + 3, on_device).ok());
  const size_t send_off[] = {5}, recv_off[] = {16}, sizes[] = {900};
  ASSERT_TRUE(host.AllToAllV(in.data(), sizes, send_off, host_out.data(), sizes, recv_off).ok());
  ASSERT_TRUE((*nccl)->AllToAllV(dev_in.data(), sizes, send_off, dev_out.data(), sizes, recv_off, on_device).ok());
  ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
  EXPECT_EQ(dev_out.Read(), host_out);
  EXPECT_TRUE((*nccl)->Barrier().ok());

  // Host memory is the host backends' business.
  std::vector<uint8_t> plain(4);
  EXPECT_EQ((*nccl)->Broadcast(plain.data(), 4, 0).code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ((*nccl)->name(), "nccl");
  cudaStreamDestroy(stream);
}

#else

TEST(NcclCommunicatorTest, OneRankMovesTheBytesTheInProcessCommunicatorMoves) {
  GTEST_SKIP() << "dgrr was built without CUDA, so without NCCL";
}

#endif

}  // namespace
}  // namespace dgrr
