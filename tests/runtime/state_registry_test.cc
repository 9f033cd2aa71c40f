#include "runtime/state_registry.h"

#include <gtest/gtest.h>

#include <thread>

#include "runtime/outlier_ranks.h"

namespace dgrr {
namespace {

TEST(StateRegistry, RegistersAndFindsByName) {
  StateRegistry reg;
  float w[4] = {1, 2, 3, 4};
  uint64_t cursor = 7;
  ASSERT_TRUE(reg.Register({"params", w, sizeof w, DType::kF32, {4}, StateRole::kParameter}).ok());
  ASSERT_TRUE(reg.Register({"data.cursor", &cursor, 8, DType::kU64, {1}, StateRole::kCursor,
                            RestorePolicy::kFastForward})
                  .ok());
  ASSERT_NE(reg.Find("data.cursor"), nullptr);
  EXPECT_EQ(reg.Find("data.cursor")->restore, RestorePolicy::kFastForward);
  EXPECT_EQ(reg.Find("nope"), nullptr);
  EXPECT_EQ(reg.entries().size(), 2u);
}

TEST(StateRegistry, RejectsBadEntries) {
  StateRegistry reg;
  float w[4] = {};
  EXPECT_TRUE(reg.Register({"", w, 16, DType::kUnknown, {}}).IsInvalidArgument());
  EXPECT_TRUE(reg.Register({"x", nullptr, 16, DType::kUnknown, {}}).IsInvalidArgument());
  EXPECT_TRUE(reg.Register({"x", w, 12, DType::kF32, {4}}).IsInvalidArgument()) << "size vs shape";
  ASSERT_TRUE(reg.Register({"x", w, 16, DType::kF32, {4}}).ok());
  EXPECT_TRUE(reg.Register({"x", w, 16, DType::kUnknown, {}}).IsInvalidArgument()) << "duplicate name";
}

TEST(StateRegistry, ParameterFingerprintCoversParametersInOrderOnly) {
  StateRegistry reg;
  float a[3] = {1, 2, 3}, b[2] = {4, 5}, m[2] = {9, 9};
  ASSERT_TRUE(reg.Register({"a", a, sizeof a, DType::kF32, {3}, StateRole::kParameter}).ok());
  ASSERT_TRUE(reg.Register({"adam.m", m, sizeof m, DType::kF32, {2}, StateRole::kOptimizer}).ok());
  ASSERT_TRUE(reg.Register({"b", b, sizeof b, DType::kF32, {2}, StateRole::kParameter}).ok());
  float both[5] = {1, 2, 3, 4, 5};
  EXPECT_EQ(reg.ParameterFingerprint(), FingerprintBytes(both, sizeof both));
  m[0] = 0;  // optimizer state is not part of the parameter fingerprint
  EXPECT_EQ(reg.ParameterFingerprint(), FingerprintBytes(both, sizeof both));
  b[1] = 6;
  EXPECT_NE(reg.ParameterFingerprint(), FingerprintBytes(both, sizeof both));
}

TEST(StateRegistry, ParametersLiveInOnePlaceAndOtherStateAnywhere) {
  StateRegistry reg;
  float a[3] = {1, 2, 3}, b[2] = {4, 5}, m[2] = {9, 9};
  int stream_a = 0, stream_b = 0;  // two stream identities (never dereferenced)
  const Placement on_a = Placement::Cuda(0, &stream_a);
  EXPECT_FALSE(reg.has_device_entries());
  ASSERT_TRUE(reg.Register({"a", a, sizeof a, DType::kF32, {3}, StateRole::kParameter,
                            RestorePolicy::kCheckpoint, false, on_a})
                  .ok());
  EXPECT_TRUE(reg.has_device_entries());
  EXPECT_EQ(reg.parameter_placement().stream, &stream_a);
  // Optimizer state may live elsewhere: only the parameters are one stream.
  ASSERT_TRUE(reg.Register({"adam.m", m, sizeof m, DType::kF32, {2}, StateRole::kOptimizer}).ok());
  const Status on_host = reg.Register({"b", b, sizeof b, DType::kF32, {2}, StateRole::kParameter});
  EXPECT_TRUE(on_host.IsInvalidArgument());
  EXPECT_NE(on_host.ToString().find("cuda:0"), std::string::npos) << on_host.ToString();
  EXPECT_TRUE(reg.Register({"b", b, sizeof b, DType::kF32, {2}, StateRole::kParameter, RestorePolicy::kCheckpoint,
                            false, Placement::Cuda(0, &stream_b)})
                  .IsInvalidArgument())
      << "another stream";
  EXPECT_TRUE(reg.Register({"b", b, sizeof b, DType::kF32, {2}, StateRole::kParameter, RestorePolicy::kCheckpoint,
                            false, Placement::Cuda(1, &stream_a)})
                  .IsInvalidArgument())
      << "another device";
  Placement no_number = on_a;
  no_number.device = -1;
  const Status unnumbered = reg.Register({"c", m, sizeof m, DType::kF32, {2}, StateRole::kOptimizer,
                                          RestorePolicy::kCheckpoint, false, no_number});
  EXPECT_TRUE(unnumbered.IsInvalidArgument()) << "a CUDA placement without a device number";
  EXPECT_NE(unnumbered.ToString().find("'c'"), std::string::npos) << unnumbered.ToString();
  ASSERT_TRUE(reg.Register({"b", b, sizeof b, DType::kF32, {2}, StateRole::kParameter, RestorePolicy::kCheckpoint,
                            false, on_a})
                  .ok());
  const std::vector<MemorySegment> segments = reg.ParameterSegments();
  ASSERT_EQ(segments.size(), 2u);
  EXPECT_EQ(segments[0].data, a);
  EXPECT_EQ(segments[0].bytes, sizeof a);
  EXPECT_EQ(segments[1].data, b);
  EXPECT_EQ(segments[1].bytes, sizeof b);
}

// The session makes its device fingerprinter through this hook, before the
// training loop (docs/api.md, "Device state"): once, at the first entry on a
// device, after it is accepted; host entries and refused ones never call it.
TEST(StateRegistry, TheFirstDeviceEntryCallsTheHookOnce) {
  StateRegistry reg;
  int calls = 0;
  size_t entries_when_called = 0;
  reg.set_first_device_entry_hook([&] {
    ++calls;
    entries_when_called = reg.entries().size();
  });
  float w[4] = {};
  ASSERT_TRUE(reg.Register({"host", w, sizeof w, DType::kF32, {4}, StateRole::kParameter}).ok());
  EXPECT_EQ(calls, 0);
  StateEntry bad{"bad", w, sizeof w, DType::kF32, {4}, StateRole::kOptimizer};
  bad.where = Placement::Cuda(-1, nullptr);
  EXPECT_TRUE(reg.Register(bad).IsInvalidArgument());
  EXPECT_EQ(calls, 0) << "a refused entry prepares nothing";
  StateEntry m{"m", w, sizeof w, DType::kF32, {4}, StateRole::kOptimizer};
  m.where = Placement::Cuda(0, nullptr);
  ASSERT_TRUE(reg.Register(m).ok());
  EXPECT_EQ(calls, 1);
  EXPECT_EQ(entries_when_called, 2u) << "called after the entry is accepted";
  StateEntry v{"v", w, sizeof w, DType::kF32, {4}, StateRole::kOptimizer};
  v.where = Placement::Cuda(0, nullptr);
  ASSERT_TRUE(reg.Register(v).ok());
  EXPECT_EQ(calls, 1);
}

TEST(OutlierRanks, AreTheMinorityOrThoseDifferingFromRankZero) {
  Fingerprint a{1, 2}, b{3, 4};
  EXPECT_EQ(OutlierRanks({a, a, b, a}), std::vector<int>{2});
  EXPECT_EQ(OutlierRanks({a, b}), std::vector<int>{1}) << "no majority: compare with rank 0";
  EXPECT_TRUE(OutlierRanks({a, a}).empty());
  EXPECT_TRUE(OutlierRanks({}).empty());
}

}  // namespace
}  // namespace dgrr
