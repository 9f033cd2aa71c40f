// Recording device tensors: the fingerprint is enqueued on the tensor's stream
// and the record waits for it in program order, without the host waiting for
// the device. A fake device (tests/support/fake_device.h: memory the host
// cannot touch, fingerprints that "complete" when the test says so) stands in
// for CUDA, so every ordering case runs on any machine;
// tests/fingerprint/fingerprint_cuda_test.cc runs the real one on a GPU.
#include <gtest/gtest.h>

#include <map>
#include <vector>

#include "fingerprint/async_fingerprint.h"
#include "runtime/session.h"
#include "runtime/session_seams.h"
#include "tests/support/fake_device.h"
#include "tests/support/temp_dir_test.h"
#include "trace_format/reader.h"

#if DGRR_FINGERPRINT_HAVE_CUDA
#include "tests/support/cuda_device.h"
#endif

namespace dgrr {
namespace {

using trace::Direction;
using trace::Phase;

using test_support::FakeDevice;

// A host buffer labelled as device memory: what must never be read by the host.
TensorRef OnDevice(TensorRef t) {
  t.where = Placement::Cuda(0, nullptr);
  return t;
}

class DeviceRecordTest : public ::dgrr::test_support::TempDirTest {
 protected:
  SessionOptions Options(const std::string& sub) {
    SessionOptions o;
    o.run_dir = (dir_ / sub).string();
    o.seed = 5;
    o.gpu = false;
    return o;
  }
  // The fake device stands in for the session's CUDA one.
  SessionSeams Seams() {
    SessionSeams seams;
    seams.device_fingerprinter = device_;
    return seams;
  }
  trace::Trace ReadTrace(const std::string& sub) {
    auto t = trace::ReadWholeTrace(TracePathFor((dir_ / sub).string(), 0));
    EXPECT_TRUE(t.ok()) << t.status().ToString();
    return t.ok() ? *t : trace::Trace{};
  }

  std::shared_ptr<FakeDevice> device_ = std::make_shared<FakeDevice>();
  std::vector<float> a_ = {1, 2, 3, 4}, b_ = {5, 6, 7, 8, 9}, c_ = {10, 11};
};

struct Seen {
  std::string what;  // "A", "B", "C" (boundary names), "begin", "end"
  uint64_t step = 0;
  uint64_t xxh3 = 0;
};

std::vector<Seen> Summarize(const trace::Trace& trace) {
  std::vector<Seen> out;
  for (const auto& r : trace.records) {
    if (auto* b = std::get_if<trace::BoundaryRecord>(&r.body)) {
      out.push_back({trace.names.at(b->name_id), b->step, b->xxh3});
    }
    if (auto* s = std::get_if<trace::StepRecord>(&r.body)) {
      out.push_back({s->kind == trace::StepKind::kBegin ? "begin" : "end", s->step, 0});
    }
  }
  return out;
}

TEST_F(DeviceRecordTest, RecordsWaitInProgramOrderAndTheHostNeverWaits) {
  auto s = Session::Open(Options("run"), Seams());
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  Session& session = **s;
  auto A = session.DeclareBoundary("A", Phase::kForward, Direction::kOutput);
  auto B = session.DeclareBoundary("B", Phase::kForward, Direction::kOutput);
  auto C = session.DeclareBoundary("C", Phase::kBackward, Direction::kOutput);
  ASSERT_TRUE(A.ok() && B.ok() && C.ok());
  auto a = MakeTensorRef(a_.data(), DType::kF32, {4});
  auto b = MakeTensorRef(b_.data(), DType::kF32, {5});
  auto c = MakeTensorRef(c_.data(), DType::kF32, {2});

  ASSERT_TRUE(session.BeginStep(0).ok());
  ASSERT_TRUE(session.Record(*A, *a, {0, 1}).ok());
  ASSERT_TRUE(session.Record(*B, device_->Put(*b), {0, 1}).ok());
  ASSERT_TRUE(session.Record(*C, *c, {0, 1}).ok());
  ASSERT_TRUE(session.EndStep(0, 1.5f).ok());
  // B has not come back: B, C and the step end wait behind it.
  EXPECT_EQ(session.records_waiting(), 3u);
  device_->Complete(1);
  ASSERT_TRUE(session.BeginStep(1).ok());  // finds B ready and writes everything
  EXPECT_EQ(session.records_waiting(), 0u);
  ASSERT_TRUE(session.Record(*B, device_->Put(*b), {1, 1}).ok());
  ASSERT_TRUE(session.EndStep(1, 1.0f).ok());
  EXPECT_EQ(device_->waits, 0) << "recording made the host wait for the device";
  ASSERT_TRUE(session.Close().ok());
  EXPECT_EQ(device_->waits, 1) << "Close waits for the last device record";
  EXPECT_EQ(device_->in_flight(), 0u);

  const uint64_t b_fp = FingerprintBytes(b_.data(), b_.size() * 4).xxh3;
  const std::vector<Seen> seen = Summarize(ReadTrace("run"));
  const std::vector<std::pair<std::string, uint64_t>> expected = {
      {"begin", 0}, {"A", 0}, {"B", 0}, {"C", 0}, {"end", 0}, {"begin", 1}, {"B", 1}, {"end", 1}};
  ASSERT_EQ(seen.size(), expected.size());
  for (size_t i = 0; i < seen.size(); ++i) {
    EXPECT_EQ(seen[i].what, expected[i].first) << i;
    EXPECT_EQ(seen[i].step, expected[i].second) << i;
    if (seen[i].what == "B") {
      EXPECT_EQ(seen[i].xxh3, b_fp);
    }
  }
}

TEST_F(DeviceRecordTest, ALaterFingerprintThatIsReadyFirstStillWaitsItsTurn) {
  auto s = Session::Open(Options("run"), Seams());
  ASSERT_TRUE(s.ok());
  Session& session = **s;
  auto X = session.DeclareBoundary("X", Phase::kForward, Direction::kOutput);
  auto Y = session.DeclareBoundary("Y", Phase::kForward, Direction::kOutput);
  auto a = MakeTensorRef(a_.data(), DType::kF32, {4});
  auto b = MakeTensorRef(b_.data(), DType::kF32, {5});
  ASSERT_TRUE(session.BeginStep(0).ok());
  ASSERT_TRUE(session.Record(*X, device_->Put(*a), {0, 1}).ok());
  ASSERT_TRUE(session.Record(*Y, device_->Put(*b), {0, 1}).ok());
  device_->Complete(2);  // Y is done, X is not
  ASSERT_TRUE(session.EndStep(0, 0.f).ok());
  EXPECT_EQ(session.records_waiting(), 3u);
  device_->Complete(1);
  ASSERT_TRUE(session.BeginStep(1).ok());
  EXPECT_EQ(session.records_waiting(), 0u);
  ASSERT_TRUE(session.EndStep(1, 0.f).ok());
  ASSERT_TRUE(session.Close().ok());
  EXPECT_EQ(device_->waits, 0);
  const std::vector<Seen> seen = Summarize(ReadTrace("run"));
  ASSERT_EQ(seen.size(), 6u);
  EXPECT_EQ(seen[1].what, "X");
  EXPECT_EQ(seen[1].xxh3, FingerprintBytes(a_.data(), 16).xxh3);
  EXPECT_EQ(seen[2].what, "Y");
  EXPECT_EQ(seen[2].xxh3, FingerprintBytes(b_.data(), 20).xxh3);
}

// The same program recording host tensors and "device" tensors writes the
// same records (the times apart).
TEST_F(DeviceRecordTest, ADeviceRunRecordsWhatAHostRunRecords) {
  for (const std::string sub : {"host", "device"}) {
    auto s = Session::Open(Options(sub), Seams());
    ASSERT_TRUE(s.ok());
    Session& session = **s;
    std::vector<float> params = {0.5f, 0.25f};
    ASSERT_TRUE(session.state()
                    .Register({"params", params.data(), 8, DType::kF32, {2}, StateRole::kParameter})
                    .ok());
    auto out = session.DeclareBoundary("layer.out", Phase::kForward, Direction::kOutput, OpKind::kMatmul);
    auto grad = session.DeclareBoundary("layer.dinp", Phase::kBackward, Direction::kOutput, OpKind::kMatmul);
    for (uint64_t step = 0; step < 4; ++step) {
      ASSERT_TRUE(session.BeginStep(step).ok());
      std::vector<float> y = {params[0] * static_cast<float>(step), params[1] + 1.0f, 3.0f};
      auto yt = MakeTensorRef(y.data(), DType::kF32, {3});
      const TensorRef t = sub == "device" ? device_->Put(*yt) : *yt;
      ASSERT_TRUE(session.Record(*out, t, {step, 1}).ok());
      ASSERT_TRUE(session.Record(*grad, t, {step, 1}).ok());
      params[0] += 0.125f;
      if (sub == "device" && step % 2 == 1) device_->CompleteAll();  // steps 0, 2 wait longer
      ASSERT_TRUE(session.EndStep(step, 0.25f * static_cast<float>(step)).ok());
    }
    ASSERT_TRUE(session.Close().ok());
  }
  auto host = trace::ReadWholeTrace(TracePathFor((dir_ / "host").string(), 0));
  auto device = trace::ReadWholeTrace(TracePathFor((dir_ / "device").string(), 0));
  ASSERT_TRUE(host.ok() && device.ok());
  ASSERT_EQ(host->records.size(), device->records.size());
  for (size_t i = 0; i < host->records.size(); ++i) {
    const auto& h = host->records[i].body;
    const auto& d = device->records[i].body;
    ASSERT_EQ(h.index(), d.index()) << i;
    if (auto* hb = std::get_if<trace::BoundaryRecord>(&h)) {
      auto* db = std::get_if<trace::BoundaryRecord>(&d);
      EXPECT_EQ(hb->seq, db->seq) << i;
      EXPECT_EQ(hb->name_id, db->name_id) << i;
      EXPECT_EQ(hb->xor64, db->xor64) << i;
      EXPECT_EQ(hb->xxh3, db->xxh3) << i;
      EXPECT_EQ(hb->byte_count, db->byte_count) << i;
      EXPECT_EQ(hb->dims[0], db->dims[0]) << i;
    }
    if (auto* hs = std::get_if<trace::StepRecord>(&h)) {
      auto* ds = std::get_if<trace::StepRecord>(&d);
      EXPECT_EQ(hs->params_xxh3, ds->params_xxh3) << i;
      EXPECT_EQ(hs->loss_bits, ds->loss_bits) << i;
    }
  }
}

TEST_F(DeviceRecordTest, SyncAndAskingForTheValueWait) {
  auto s = Session::Open(Options("run"), Seams());
  ASSERT_TRUE(s.ok());
  Session& session = **s;
  auto X = session.DeclareBoundary("X", Phase::kForward, Direction::kOutput);
  auto a = MakeTensorRef(a_.data(), DType::kF32, {4});
  ASSERT_TRUE(session.BeginStep(0).ok());
  ASSERT_TRUE(session.Record(*X, device_->Put(*a), {0, 1}).ok());
  const uint64_t before = session.trace_position();
  ASSERT_TRUE(session.Sync().ok());
  EXPECT_EQ(device_->waits, 1);
  EXPECT_EQ(session.records_waiting(), 0u);
  EXPECT_EQ(session.trace_position(), before + 2) << "the NAME and BOUNDARY records of X";
  Fingerprint fp;
  ASSERT_TRUE(session.Record(*X, device_->Put(*a), {0, 1}, &fp).ok());
  EXPECT_EQ(device_->waits, 2);
  EXPECT_EQ(fp, FingerprintBytes(a_.data(), 16));
  EXPECT_EQ(session.records_waiting(), 0u);
  ASSERT_TRUE(session.Close().ok());
}

TEST_F(DeviceRecordTest, WithoutADeviceFingerprinterADeviceTensorIsRefusedByName) {
#if DGRR_FINGERPRINT_HAVE_CUDA
  std::string why;
  if (test_support::HaveCudaDevice(&why)) {
    GTEST_SKIP() << "a CUDA device is present: this checks the refusal without one "
                    "(DeviceRecordCudaTest records on the device)";
  }
#endif
  // No seam: the session makes its own (CUDA) fingerprinter.
  auto s = Session::Open(Options("run"));
  ASSERT_TRUE(s.ok());
  auto X = (*s)->DeclareBoundary("X", Phase::kForward, Direction::kOutput);
  auto a = MakeTensorRef(a_.data(), DType::kF32, {4});
  ASSERT_TRUE((*s)->BeginStep(0).ok());
  // This machine's build has no CUDA or no device: either way a clear refusal,
  // and nothing read from the "device" pointer on the host.
  const Status st = (*s)->Record(*X, OnDevice(*a), {0, 1});
  EXPECT_TRUE(st.code() == StatusCode::kFailedPrecondition) << st.ToString();
  EXPECT_NE(st.ToString().find("CUDA"), std::string::npos) << st.ToString();
  ASSERT_TRUE((*s)->Close().ok());
}

TEST(DeviceTensorRef, TheHostNeverFingerprintsDeviceMemory) {
  float x[2] = {1, 2};
  auto t = MakeTensorRef(x, DType::kF32, {2});
  ASSERT_TRUE(t.ok());
  TensorRef d = OnDevice(*t);
  auto fp = FingerprintTensor(d);
  EXPECT_TRUE(fp.status().code() == StatusCode::kFailedPrecondition);
  EXPECT_NE(fp.status().ToString().find("cuda:0"), std::string::npos) << fp.status().ToString();
}

}  // namespace
}  // namespace dgrr
