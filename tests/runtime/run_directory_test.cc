// RunDirectory: one writer lock, and a resume point that every rank's trace
// still reaches (the fallback passes over a checkpoint a trace was cut short
// of; without it that is refused), cut back to exactly.
#include "runtime/run_directory.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>

#include "runtime/checkpoint_store.h"
#include "trace_format/reader.h"
#include "trace_format/writer.h"

namespace dgrr {
namespace {

namespace fs = std::filesystem;

// Checkpoints by step, each with a trace position per rank; nothing on disk.
class PositionsStore final : public CheckpointStore {
 public:
  class Loaded final : public LoadedCheckpoint {
   public:
    Loaded(std::string path, uint64_t step, std::vector<uint64_t> positions)
        : path_(std::move(path)), step_(step), positions_(std::move(positions)) {}
    const std::string& path() const override { return path_; }
    uint64_t step() const override { return step_; }
    uint64_t config_digest() const override { return 0; }
    int world_size() const override { return static_cast<int>(positions_.size()); }
    uint64_t trace_position(int rank) const override { return positions_[static_cast<size_t>(rank)]; }
    Status Restore(int, StateRegistry&) const override { return Status::OK(); }

   private:
    std::string path_;
    uint64_t step_;
    std::vector<uint64_t> positions_;
  };
  std::map<uint64_t, std::vector<uint64_t>> checkpoints;  // step -> positions

  StatusOr<CheckpointShard> WriteShard(const CheckpointRequest&) override { return Status::Internal("unused"); }
  Status Commit(const CheckpointRequest&, const std::vector<CheckpointShard>&) override {
    return Status::Internal("unused");
  }
  StatusOr<std::unique_ptr<LoadedCheckpoint>> Load(const std::string&) override { return Status::Internal("unused"); }
  StatusOr<std::unique_ptr<LoadedCheckpoint>> FindNewest(const std::string&, bool, uint64_t max_step) override {
    for (auto it = checkpoints.rbegin(); it != checkpoints.rend(); ++it) {
      if (it->first > max_step) continue;
      return std::unique_ptr<LoadedCheckpoint>(
          new Loaded("ckpt-" + std::to_string(it->first), it->first, it->second));
    }
    return Status::NotFound("no checkpoint");
  }
  Status RemoveTemporaries(const std::string&) override { return Status::OK(); }
  Status WriteTensorDump(const std::string&, const std::string&, const std::string&, uint64_t, int,
                         const std::vector<CapturedTensor>&) override {
    return Status::Internal("unused");
  }
};

class RunDirectoryTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = (fs::temp_directory_path() / ("dgrr_run_directory_" + std::to_string(::getpid()))).string();
    fs::remove_all(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  // A trace of `steps` steps for `rank`: per step a STEP end record and a
  // CHECKPOINT event, so the checkpoint of step s lies at 2 * (s + 1).
  void WriteTrace(int rank, uint64_t steps) {
    trace::TraceHeader header;
    header.rank = static_cast<uint32_t>(rank);
    header.world_size = 2;
    auto writer = trace::TraceWriter::Create(TracePathFor(dir_, rank), header);
    ASSERT_TRUE(writer.ok()) << writer.status().ToString();
    for (uint64_t s = 0; s < steps; ++s) {
      trace::StepRecord step;
      step.step = s;
      step.kind = trace::StepKind::kEnd;
      ASSERT_TRUE((*writer)->AppendStep(step).ok());
      trace::EventRecord event;
      event.step = s;
      event.kind = trace::EventKind::kCheckpoint;
      event.payload = "step " + std::to_string(s);
      ASSERT_TRUE((*writer)->AppendEvent(event).ok());
    }
    ASSERT_TRUE((*writer)->Close().ok());
  }
  std::string dir_;
};

TEST_F(RunDirectoryTest, OneWriterAndNothingCreatedForAMissingRun) {
  RunDirectory missing(dir_);
  EXPECT_FALSE(missing.LockExisting().ok());
  EXPECT_FALSE(fs::exists(dir_));  // LockExisting never creates it
  RunDirectory first(dir_), second(dir_);
  ASSERT_TRUE(first.Lock().ok());  // creates it
  EXPECT_TRUE(fs::is_directory(dir_));
  EXPECT_TRUE(first.Lock().ok());  // held already: nothing to do
  const Status refused = second.Lock();
  EXPECT_TRUE(refused.IsIOError()) << refused.ToString();
  first.Unlock();
  EXPECT_TRUE(second.Lock().ok());
  std::ofstream(dir_ + "/file") << "x";
  RunDirectory not_a_directory(dir_ + "/file");
  EXPECT_EQ(not_a_directory.Lock().code(), StatusCode::kInvalidArgument);
}

// A checkpoint is a resume point for a rank only when the rank's trace
// reaches it: the position it records lies within the trace, just past an
// EVENT of the checkpoint's step.
TEST_F(RunDirectoryTest, ATraceReachesACheckpointOnlyJustPastItsEvent) {
  fs::create_directories(dir_);
  WriteTrace(0, 4);
  WriteTrace(1, 4);
  PositionsStore store;
  store.checkpoints[1] = {4, 4};
  store.checkpoints[3] = {8, 8};
  RunDirectory run(dir_);
  auto newest = store.FindNewest(dir_, false, UINT64_MAX);
  ASSERT_TRUE(newest.ok());
  for (int r = 0; r < 2; ++r) {
    auto end = run.ScanTraceEnd(r);
    ASSERT_TRUE(end.ok()) << end.status().ToString();
    EXPECT_EQ(end->records, 8u);
    EXPECT_EQ(end->Unreachable(**newest, r), "") << r;
  }

  // Rank 1's trace cut short of step 3's checkpoint (an interrupted rollback).
  ASSERT_TRUE(trace::TruncateTraceAt(TracePathFor(dir_, 1), 6).ok());
  auto end1 = run.ScanTraceEnd(1);
  ASSERT_TRUE(end1.ok());
  const std::string why = end1->Unreachable(**newest, 1);
  EXPECT_NE(why.find("trace position 8 for rank 1"), std::string::npos) << why;
  EXPECT_NE(why.find("(6 records) does not reach"), std::string::npos) << why;
  auto older = store.FindNewest(dir_, false, 2);
  ASSERT_TRUE(older.ok());
  EXPECT_EQ(end1->Unreachable(**older, 1), "");

  // Cut back to it: each trace ends just past the checkpoint's event.
  for (int r = 0; r < 2; ++r) ASSERT_TRUE(run.CutTrace(r, **older).ok());
  for (int r = 0; r < 2; ++r) {
    auto trace = trace::ReadWholeTrace(TracePathFor(dir_, r));
    ASSERT_TRUE(trace.ok()) << trace.status().ToString();
    EXPECT_EQ(trace->records.size(), 4u);
  }

  // A position that lands on no checkpoint event of the step is not reached,
  // nor is one past the trace's end; position 0 (mode off) always is.
  store.checkpoints.erase(3);
  store.checkpoints[1] = {3, 4};
  auto off_event = store.FindNewest(dir_, false, UINT64_MAX);
  ASSERT_TRUE(off_event.ok());
  auto end0 = run.ScanTraceEnd(0);
  ASSERT_TRUE(end0.ok());
  EXPECT_NE(end0->Unreachable(**off_event, 0), "");
  EXPECT_EQ(run.ScanTraceEnd(1)->Unreachable(**off_event, 1), "");
  store.checkpoints[1] = {0, 40};
  auto positions = store.FindNewest(dir_, false, UINT64_MAX);
  EXPECT_EQ(end0->Unreachable(**positions, 0), "");
  EXPECT_NE(run.ScanTraceEnd(1)->Unreachable(**positions, 1), "");
}

}  // namespace
}  // namespace dgrr
