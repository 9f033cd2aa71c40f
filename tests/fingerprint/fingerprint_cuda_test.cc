// Device fingerprints equal the CPU ones, bit for bit. Needs a CUDA device;
// skips (saying why) where there is none.
#include "fingerprint/fingerprint_cuda.h"
#include "fingerprint/async_fingerprint.h"
#include "fingerprint/tensor.h"

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <string>
#include <vector>

#include "tests/support/cuda_device.h"
#include "tests/support/stream_gate.h"

namespace dgrr {
namespace {


// Device copy of host bytes, kept at a chosen misalignment.
class DeviceBuffer {
 public:
  DeviceBuffer(const std::vector<uint8_t>& host, size_t shift) {
    EXPECT_EQ(cudaMalloc(&base_, host.size() + shift + 1), cudaSuccess);
    data_ = static_cast<uint8_t*>(base_) + shift;
    if (!host.empty()) {
      EXPECT_EQ(cudaMemcpy(data_, host.data(), host.size(), cudaMemcpyHostToDevice), cudaSuccess);
    }
  }
  ~DeviceBuffer() { cudaFree(base_); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  const uint8_t* data() const { return data_; }

 private:
  void* base_ = nullptr;
  uint8_t* data_ = nullptr;
};

std::vector<uint8_t> RandomBytes(size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<uint8_t> v(n);
  for (auto& b : v) b = static_cast<uint8_t>(rng());
  return v;
}

TEST(FingerprintCudaTest, RejectsNullArgumentsWithoutTouchingTheDevice) {
  Fingerprint out;
  EXPECT_TRUE(FingerprintDeviceAsync(nullptr, 5, nullptr, &out).IsInvalidArgument());
  int dummy = 0;
  EXPECT_TRUE(FingerprintDeviceAsync(&dummy, 4, nullptr, nullptr).IsInvalidArgument());
}

TEST(FingerprintCudaTest, MatchesCpuForManyLengthsAndAlignments) {
  DGRR_SKIP_WITHOUT_CUDA_DEVICE();
  const std::vector<uint8_t> all = RandomBytes((4 << 20) + 3, 31);
  std::vector<size_t> lengths;
  for (size_t len = 0; len <= 300; ++len) lengths.push_back(len);
  for (size_t len : {1023, 1024, 1025, 2047, 2048, 2049, 4095, 4096, 4097, 65536 + 5, (1 << 20) - 1,
                     (1 << 20) + 7}) {
    lengths.push_back(len);
  }
  lengths.push_back(all.size());
  cudaStream_t stream;
  ASSERT_EQ(cudaStreamCreate(&stream), cudaSuccess);
  for (size_t shift : {0, 1, 3, 8}) {
    DeviceBuffer device(all, shift);
    for (size_t len : lengths) {
      StatusOr<Fingerprint> got = FingerprintDevice(device.data(), len, stream);
      ASSERT_TRUE(got.ok()) << got.status().ToString();
      const Fingerprint expected = FingerprintBytes(all.data(), len);
      EXPECT_EQ(got->xor64, expected.xor64) << "len=" << len << " shift=" << shift;
      EXPECT_EQ(got->xxh3, expected.xxh3) << "len=" << len << " shift=" << shift;
    }
  }
  cudaStreamDestroy(stream);
}

TEST(FingerprintCudaTest, AsyncIntoPinnedMemoryOnAStream) {
  DGRR_SKIP_WITHOUT_CUDA_DEVICE();
  const std::vector<uint8_t> host = RandomBytes(3 << 20, 32);
  DeviceBuffer device(host, 0);
  cudaStream_t stream;
  ASSERT_EQ(cudaStreamCreate(&stream), cudaSuccess);
  Fingerprint* pinned = nullptr;
  ASSERT_EQ(cudaMallocHost(&pinned, 2 * sizeof(Fingerprint)), cudaSuccess);
  ASSERT_TRUE(FingerprintDeviceAsync(device.data(), host.size(), stream, &pinned[0]).ok());
  ASSERT_TRUE(FingerprintDeviceAsync(device.data() + 5, 1000, stream, &pinned[1]).ok());
  ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
  EXPECT_EQ(pinned[0], FingerprintBytes(host.data(), host.size()));
  EXPECT_EQ(pinned[1], FingerprintBytes(host.data() + 5, 1000));
  cudaFreeHost(pinned);
  cudaStreamDestroy(stream);
}

}  // namespace
}  // namespace dgrr

// --- AsyncFingerprinter (fingerprint/async_fingerprint.h) ---

namespace dgrr {
namespace {

TEST(AsyncFingerprinterCudaTest, WithoutADeviceItIsAClearRefusal) {
  std::string why;
  if (test_support::HaveCudaDevice(&why)) GTEST_SKIP() << "a CUDA device is present: this checks the refusal without one";
  auto made = MakeCudaFingerprinter();
  EXPECT_EQ(made.status().code(), StatusCode::kFailedPrecondition) << made.status().ToString();
}

TEST(AsyncFingerprinterCudaTest, MatchesTheHostInAnyCollectionOrderAndRetiresTickets) {
  DGRR_SKIP_WITHOUT_CUDA_DEVICE();
  auto made = MakeCudaFingerprinter();
  ASSERT_TRUE(made.ok()) << made.status().ToString();
  AsyncFingerprinter& fp = **made;
  const std::vector<uint8_t> all = RandomBytes(1 << 20, 77);
  DeviceBuffer buf(all, 0);
  cudaStream_t stream;
  ASSERT_EQ(cudaStreamCreate(&stream), cudaSuccess);
  // More tensors than one block of result slots, of many lengths and offsets.
  std::vector<std::pair<size_t, size_t>> spans;  // offset, length
  for (size_t i = 0; i < 200; ++i) spans.push_back({(i * 7919) % 4096, (i * 104729) % (all.size() - 4096)});
  std::vector<AsyncFingerprinter::Ticket> tickets;
  for (auto [off, len] : spans) {
    TensorRef t = MakeBytesRef(buf.data() + off, len);
    t.where = Placement::Cuda(0, stream);
    auto ticket = fp.Enqueue(t);
    ASSERT_TRUE(ticket.ok()) << ticket.status().ToString();
    tickets.push_back(*ticket);
  }
  for (size_t k = spans.size(); k-- > 0;) {  // last first: order of collection does not matter
    Fingerprint got;
    if (k % 2 == 1) {
      auto waited = fp.Wait(tickets[k]);
      ASSERT_TRUE(waited.ok()) << waited.status().ToString();
      got = *waited;
    } else {
      ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
      auto polled = fp.Poll(tickets[k]);
      ASSERT_TRUE(polled.ok() && polled->has_value()) << polled.status().ToString();
      got = **polled;
    }
    EXPECT_EQ(got, FingerprintBytes(all.data() + spans[k].first, spans[k].second)) << k;
  }
  EXPECT_TRUE(fp.Wait(tickets[0]).status().IsInvalidArgument()) << "a collected ticket is retired";
  EXPECT_TRUE(fp.Poll(12345678).status().IsInvalidArgument());
  int host = 1;
  EXPECT_TRUE(fp.Enqueue(MakeBytesRef(&host, 4)).status().IsInvalidArgument()) << "host memory is refused";
  cudaStreamDestroy(stream);
}

}  // namespace
}  // namespace dgrr

// --- Segmented device fingerprints (the parameters' fingerprint) ---

namespace dgrr {
namespace {

// Device segments of the given lengths cut out of one device buffer with a
// gap before each (so their addresses have every alignment), and the host
// copy of their concatenation.
struct DeviceSegments {
  std::vector<MemorySegment> segments;
  std::vector<uint8_t> concatenated;
};

DeviceSegments CutOnDevice(const DeviceBuffer& device, const std::vector<uint8_t>& host,
                           const std::vector<size_t>& lengths, size_t gap) {
  DeviceSegments d;
  size_t at = 0;
  for (size_t n : lengths) {
    at += gap;
    d.segments.push_back({device.data() + at, n});
    d.concatenated.insert(d.concatenated.end(), host.begin() + at, host.begin() + at + n);
    at += n;
  }
  return d;
}

TEST(FingerprintCudaTest, SegmentsMatchTheHostForAwkwardLengths) {
  DGRR_SKIP_WITHOUT_CUDA_DEVICE();
  const std::vector<uint8_t> host = RandomBytes(1 << 20, 41);
  DeviceBuffer device(host, 0);
  cudaStream_t stream;
  ASSERT_EQ(cudaStreamCreate(&stream), cudaSuccess);
  const std::vector<std::vector<size_t>> cases = {
      {0}, {1}, {1023}, {1024}, {1025}, {65536 + 7}, {240}, {241},
      {0, 1, 1023, 1024, 1025, 65536 + 7, 0, 3},  // mixed
      {5, 1019, 5, 1019}, {100, 100, 41}, {120, 0, 120}, {2047, 2, 63, 1}, {0, 0},
      {300000, 1, 400000},  // many blocks on both sides of a one-byte segment
  };
  for (const auto& lengths : cases) {
    for (size_t gap : {0, 1, 3, 8}) {
      const DeviceSegments d = CutOnDevice(device, host, lengths, gap);
      StatusOr<Fingerprint> got = FingerprintSegmentsDevice(d.segments, stream);
      ASSERT_TRUE(got.ok()) << got.status().ToString();
      std::string what = "gap " + std::to_string(gap) + ", lengths";
      for (size_t n : lengths) what += " " + std::to_string(n);
      EXPECT_EQ(*got, FingerprintBytes(d.concatenated.data(), d.concatenated.size())) << what;
    }
  }
  // 2000 segments of 0..16 bytes: a long table, most blocks straddling.
  std::vector<size_t> small;
  for (size_t i = 0; i < 2000; ++i) small.push_back(i % 17);
  const DeviceSegments d = CutOnDevice(device, host, small, 1);
  StatusOr<Fingerprint> got = FingerprintSegmentsDevice(d.segments, stream);
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_EQ(*got, FingerprintBytes(d.concatenated.data(), d.concatenated.size()));
  cudaStreamDestroy(stream);
}

TEST(AsyncFingerprinterCudaTest, SegmentsAndCopiesThroughTheFingerprinter) {
  DGRR_SKIP_WITHOUT_CUDA_DEVICE();
  auto made = MakeCudaFingerprinter();
  ASSERT_TRUE(made.ok()) << made.status().ToString();
  AsyncFingerprinter& fp = **made;
  const std::vector<uint8_t> host = RandomBytes(400000, 43);
  DeviceBuffer device(host, 0);
  cudaStream_t stream;
  ASSERT_EQ(cudaStreamCreate(&stream), cudaSuccess);
  const Placement where = Placement::Cuda(0, stream);
  // Tables of growing size reuse and grow the slots' pinned staging.
  std::vector<std::pair<AsyncFingerprinter::Ticket, std::vector<uint8_t>>> issued;
  for (size_t count : {1, 3, 70, 5, 300}) {
    std::vector<size_t> lengths;
    for (size_t i = 0; i < count; ++i) lengths.push_back((i * 389 + count) % 700);
    const DeviceSegments d = CutOnDevice(device, host, lengths, 2);
    auto ticket = fp.EnqueueSegments(d.segments, where);
    ASSERT_TRUE(ticket.ok()) << ticket.status().ToString();
    issued.push_back({*ticket, d.concatenated});
  }
  for (auto& [ticket, bytes] : issued) {
    auto got = fp.Wait(ticket);
    ASSERT_TRUE(got.ok()) << got.status().ToString();
    EXPECT_EQ(*got, FingerprintBytes(bytes.data(), bytes.size()));
  }
  std::vector<uint8_t> back(1000);
  ASSERT_TRUE(fp.CopyToHost(device.data() + 7, back.size(), where, back.data()).ok());
  EXPECT_TRUE(std::equal(back.begin(), back.end(), host.begin() + 7));
  std::vector<uint8_t> ones(1000, 1);
  ASSERT_TRUE(fp.CopyToDevice(ones.data(), ones.size(), where, const_cast<uint8_t*>(device.data()) + 7).ok());
  ASSERT_TRUE(fp.CopyToHost(device.data() + 7, back.size(), where, back.data()).ok());
  EXPECT_EQ(back, ones);
  EXPECT_TRUE(fp.EnqueueSegments({}, Placement::Host()).status().IsInvalidArgument());
  cudaStreamDestroy(stream);
}

using Gate = test_support::StreamGate;

// A ticket is ready only once the tensor's stream has passed the tensor,
// whatever its length: short ones (<= 240 bytes, computed whole on the
// tensor's stream) as well as long ones (the chain on a stream of the
// fingerprinter's own), single buffers and segment lists alike.
TEST(AsyncFingerprinterCudaTest, NoResultIsReadyBeforeTheTensorsStreamPassesIt) {
  DGRR_SKIP_WITHOUT_CUDA_DEVICE();
  auto made = MakeCudaFingerprinter();
  ASSERT_TRUE(made.ok()) << made.status().ToString();
  AsyncFingerprinter& fp = **made;
  const std::vector<uint8_t> host = RandomBytes(100000, 45);
  DeviceBuffer device(host, 0);
  cudaStream_t stream;
  ASSERT_EQ(cudaStreamCreate(&stream), cudaSuccess);
  const Placement where = Placement::Cuda(0, stream);
  Gate gate;
  ASSERT_EQ(cudaLaunchHostFunc(stream, &Gate::Hold, &gate), cudaSuccess);
  std::vector<std::pair<AsyncFingerprinter::Ticket, Fingerprint>> issued;
  for (size_t len : {0, 1, 17, 240, 241, 1024, 5000, 99999}) {
    TensorRef t = MakeBytesRef(device.data(), len);
    t.where = where;
    auto ticket = fp.Enqueue(t);
    ASSERT_TRUE(ticket.ok()) << ticket.status().ToString();
    issued.push_back({*ticket, FingerprintBytes(host.data(), len)});
  }
  for (size_t total : {3, 240, 3000}) {
    const std::vector<MemorySegment> segments = {{device.data(), total / 3}, {device.data() + 50000, total - total / 3}};
    std::vector<uint8_t> concatenated(host.begin(), host.begin() + total / 3);
    concatenated.insert(concatenated.end(), host.begin() + 50000, host.begin() + 50000 + (total - total / 3));
    auto ticket = fp.EnqueueSegments(segments, where);
    ASSERT_TRUE(ticket.ok()) << ticket.status().ToString();
    issued.push_back({*ticket, FingerprintBytes(concatenated.data(), concatenated.size())});
  }
  for (const auto& [ticket, want] : issued) {
    auto polled = fp.Poll(ticket);
    ASSERT_TRUE(polled.ok()) << polled.status().ToString();
    EXPECT_FALSE(polled->has_value()) << "ticket " << ticket << " ready while its stream is held";
  }
  gate.open.store(true);
  for (const auto& [ticket, want] : issued) {
    auto got = fp.Wait(ticket);
    ASSERT_TRUE(got.ok()) << got.status().ToString();
    EXPECT_EQ(*got, want) << "ticket " << ticket;
  }
  EXPECT_FALSE(gate.let_go.load());
  ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
  cudaStreamDestroy(stream);
}

}  // namespace
}  // namespace dgrr
