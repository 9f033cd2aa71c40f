// Recording CUDA tensors and device parameters on a real device: the
// session's records carry the fingerprints the host computes over the same
// bytes, and Record and EndStep return while the stream is still busy (they
// never synchronize). Skips, saying
// why, without a CUDA build or without a device.
#include <gtest/gtest.h>

#include <atomic>
#include <memory>
#include <vector>

#include "runtime/run_directory.h"
#include "runtime/session.h"
#include "tests/support/temp_dir_test.h"
#include "trace_format/reader.h"

#if DGRR_FINGERPRINT_HAVE_CUDA
#include <cuda_runtime.h>

#include "tests/support/cuda_device.h"
#include "tests/support/stream_gate.h"
#endif

namespace dgrr {
namespace {

#if DGRR_FINGERPRINT_HAVE_CUDA

using Gate = test_support::StreamGate;

// Opens a gate when the test leaves its scope, early (a failed ASSERT) or
// not. Declared after the session, with the gate declared before it: the
// gate opens first, then the session's destructor waits for the stream,
// and only then does the gate itself go away.
struct OpenGateOnExit {
  Gate& gate;
  ~OpenGateOnExit() { gate.open.store(true); }
};

class DeviceRecordCudaTest : public ::dgrr::test_support::TempDirTest {
 protected:
  std::unique_ptr<Session> OpenSession() {
    SessionOptions o;
    o.run_dir = dir_.string();
    o.seed = 3;
    o.gpu = false;
    auto s = Session::Open(o);
    EXPECT_TRUE(s.ok()) << s.status().ToString();
    return s.ok() ? std::move(s).value() : nullptr;
  }
};

TEST_F(DeviceRecordCudaTest, RecordsWithoutSynchronizingAndMatchesTheHost) {
  DGRR_SKIP_WITHOUT_CUDA_DEVICE();
  std::vector<float> host(1 << 20);
  for (size_t i = 0; i < host.size(); ++i) host[i] = static_cast<float>(i % 977) * 0.5f - 3.0f;
  void* dev = nullptr;
  ASSERT_EQ(cudaMalloc(&dev, host.size() * 4), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(dev, host.data(), host.size() * 4, cudaMemcpyHostToDevice), cudaSuccess);
  cudaStream_t stream;
  ASSERT_EQ(cudaStreamCreate(&stream), cudaSuccess);

  Gate gate;
  std::unique_ptr<Session> s = OpenSession();
  ASSERT_NE(s, nullptr);
  Session& session = *s;
  auto out = session.DeclareBoundary("layer.out", trace::Phase::kForward, trace::Direction::kOutput);
  ASSERT_TRUE(out.ok());
  auto t = MakeTensorRef(dev, DType::kF32, {static_cast<int64_t>(host.size())});
  ASSERT_TRUE(t.ok());
  t->where = Placement::Cuda(0, stream);

  // Step 0 with the stream free: the first device record makes the
  // session's fingerprinter (context, kernels, pinned slots), which may wait
  // for the device once. Step 1 is the one under test.
  ASSERT_TRUE(session.BeginStep(0).ok());
  ASSERT_TRUE(session.Record(*out, *t, {0, 1}).ok());
  ASSERT_TRUE(session.EndStep(0, 1.0f).ok());
  ASSERT_TRUE(session.Sync().ok());

  const OpenGateOnExit opener{gate};
  ASSERT_EQ(cudaLaunchHostFunc(stream, &Gate::Hold, &gate), cudaSuccess);
  ASSERT_TRUE(session.BeginStep(1).ok());
  ASSERT_TRUE(session.Record(*out, *t, {0, 1}).ok());
  ASSERT_TRUE(session.EndStep(1, 1.0f).ok());
  // Record and EndStep returned although the stream cannot have reached the
  // fingerprint: the records wait, the stream is still busy.
  EXPECT_FALSE(gate.let_go.load()) << "Record or EndStep waited for the held stream";
  EXPECT_EQ(cudaStreamQuery(stream), cudaErrorNotReady);
  EXPECT_EQ(session.records_waiting(), 2u);
  gate.open.store(true);
  ASSERT_TRUE(session.Close().ok());
  EXPECT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
  EXPECT_FALSE(gate.let_go.load()) << "something waited for the held stream";

  auto trace = trace::ReadWholeTrace(TracePathFor(dir_.string(), 0));
  ASSERT_TRUE(trace.ok()) << trace.status().ToString();
  const Fingerprint expected = FingerprintBytes(host.data(), host.size() * 4);
  int boundaries = 0;
  for (const auto& r : trace->records) {
    if (auto* b = std::get_if<trace::BoundaryRecord>(&r.body)) {
      ++boundaries;
      EXPECT_EQ(b->xor64, expected.xor64);
      EXPECT_EQ(b->xxh3, expected.xxh3);
    }
  }
  EXPECT_EQ(boundaries, 2);
  cudaStreamDestroy(stream);
  cudaFree(dev);
}

// Parameters registered in device memory: the STEP record carries the
// fingerprint of their concatenation, computed on their stream; EndStep
// (one rank, no SDC check) returns while that stream is held.
TEST_F(DeviceRecordCudaTest, DeviceParametersFingerprintOnTheirStreamWithoutSynchronizing) {
  DGRR_SKIP_WITHOUT_CUDA_DEVICE();
  const std::vector<size_t> lengths = {1023, 1, 0, 70000, 1025};
  std::vector<uint8_t> concatenated;
  std::vector<void*> buffers;
  cudaStream_t stream;
  ASSERT_EQ(cudaStreamCreate(&stream), cudaSuccess);
  Gate gate;
  std::unique_ptr<Session> s = OpenSession();
  ASSERT_NE(s, nullptr);
  Session& session = *s;
  for (size_t k = 0; k < lengths.size(); ++k) {
    std::vector<uint8_t> host(lengths[k]);
    for (size_t i = 0; i < host.size(); ++i) host[i] = static_cast<uint8_t>(i * 31 + k * 7 + (i >> 8));
    concatenated.insert(concatenated.end(), host.begin(), host.end());
    void* dev = nullptr;
    ASSERT_EQ(cudaMalloc(&dev, lengths[k] + 1), cudaSuccess);
    if (!host.empty()) {
      ASSERT_EQ(cudaMemcpy(dev, host.data(), host.size(), cudaMemcpyHostToDevice), cudaSuccess);
    }
    buffers.push_back(dev);
    StateEntry e{"p" + std::to_string(k), dev, lengths[k], DType::kU8, {static_cast<int64_t>(lengths[k])},
                 StateRole::kParameter};
    e.where = Placement::Cuda(0, stream);
    ASSERT_TRUE(session.state().Register(e).ok());
  }
  const OpenGateOnExit opener{gate};
  ASSERT_EQ(cudaLaunchHostFunc(stream, &Gate::Hold, &gate), cudaSuccess);
  ASSERT_TRUE(session.BeginStep(0).ok());
  ASSERT_TRUE(session.EndStep(0, 1.0f).ok());
  // Registering the device parameters made the fingerprinter, before the
  // stream was held: nothing here waits for it.
  EXPECT_FALSE(gate.let_go.load()) << "EndStep waited for the held stream";
  EXPECT_EQ(cudaStreamQuery(stream), cudaErrorNotReady);
  EXPECT_EQ(session.records_waiting(), 1u) << "the STEP record waits for the parameters' fingerprint";
  gate.open.store(true);
  ASSERT_TRUE(session.Close().ok());
  EXPECT_FALSE(gate.let_go.load()) << "something waited for the held stream";

  auto trace = trace::ReadWholeTrace(TracePathFor(dir_.string(), 0));
  ASSERT_TRUE(trace.ok()) << trace.status().ToString();
  const Fingerprint expected = FingerprintBytes(concatenated.data(), concatenated.size());
  int ends = 0;
  for (const auto& r : trace->records) {
    if (auto* st = std::get_if<trace::StepRecord>(&r.body); st && st->kind == trace::StepKind::kEnd) {
      ++ends;
      EXPECT_EQ(st->params_xor64, expected.xor64);
      EXPECT_EQ(st->params_xxh3, expected.xxh3);
    }
  }
  EXPECT_EQ(ends, 1);
  for (void* b : buffers) cudaFree(b);
  cudaStreamDestroy(stream);
}

#else

TEST(DeviceRecordCudaTest, RecordsWithoutSynchronizingAndMatchesTheHost) {
  GTEST_SKIP() << "dgrr was built without CUDA";
}

TEST(DeviceRecordCudaTest, DeviceParametersFingerprintOnTheirStreamWithoutSynchronizing) {
  GTEST_SKIP() << "dgrr was built without CUDA";
}

#endif

}  // namespace
}  // namespace dgrr
