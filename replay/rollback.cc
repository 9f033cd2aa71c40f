#include "replay/rollback.h"

#include <stdlib.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <filesystem>
#include <limits>

#include <nlohmann/json.hpp>

#include "base/file.h"
#include "base/kill_point.h"
#include "base/run_lock.h"
#include "checkpoint/checkpoint_file.h"
#include "runtime/json_input.h"
#include "runtime/metrics_log.h"
#include "runtime/run_directory.h"
#include "runtime/session.h"
#include "trace_format/reader.h"
#include "trace_format/writer.h"

namespace dgrr::replay {
namespace {

namespace fs = std::filesystem;

// What one rank's trace says about step S.
struct TraceScan {
  std::optional<uint64_t> step_end;  // record index of step S's STEP end record
  int64_t last_completed = -1;       // highest step with a STEP end record
  uint64_t records = 0;              // whole records in the file
  uint64_t torn_tail_bytes = 0;
  bool rolled_back_event_at_cut = false;  // record step_end+1 is an EVENT kRolledBack
  RunId run_id{};
};

StatusOr<TraceScan> ScanTrace(const std::string& path, uint64_t step) {
  DGRR_ASSIGN_OR_RETURN(auto reader, trace::TraceReader::Open(path));
  TraceScan scan;
  scan.run_id = reader->header().run_id;
  trace::Record record;
  for (;;) {
    bool done = false;
    DGRR_RETURN_IF_ERROR(reader->Next(&record, &done));
    if (done) break;
    if (const auto* s = std::get_if<trace::StepRecord>(&record.body)) {
      if (s->kind != trace::StepKind::kEnd) continue;
      scan.last_completed = std::max(scan.last_completed, static_cast<int64_t>(s->step));
      if (s->step == step && !scan.step_end) scan.step_end = record.index;
    } else if (const auto* e = std::get_if<trace::EventRecord>(&record.body)) {
      if (scan.step_end && record.index == *scan.step_end + 1 &&
          e->kind == trace::EventKind::kRolledBack) {
        scan.rolled_back_event_at_cut = true;
      }
    }
  }
  scan.records = reader->records_read();
  scan.torn_tail_bytes = reader->torn_tail_bytes();
  return scan;
}

uint64_t NowUnixNs() {
  return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                   std::chrono::system_clock::now().time_since_epoch())
                                   .count());
}

// Stage 3 for one rank: keep records [0, cut), then the EVENT, durably.
Status CutTraceAndRecordEvent(const std::string& path, int rank, uint64_t cut, uint64_t step,
                              const std::string& payload) {
  DGRR_RETURN_IF_ERROR(trace::TruncateTraceAt(path, cut));
  KillPoint("rollback-cut", rank);
  DGRR_ASSIGN_OR_RETURN(auto writer, trace::TraceWriter::OpenForAppend(path));
  if (writer->records_written() != cut) {
    return Status::Internal(path + ": reopened with " + std::to_string(writer->records_written()) +
                            " records after cutting at " + std::to_string(cut));
  }
  trace::EventRecord event;
  event.step = step;
  event.kind = trace::EventKind::kRolledBack;
  event.host_time_ns = NowUnixNs();
  event.payload = payload;
  DGRR_RETURN_IF_ERROR(writer->AppendEvent(event));
  DGRR_RETURN_IF_ERROR(writer->Sync());
  DGRR_RETURN_IF_ERROR(writer->Close());
  KillPoint("rollback-event", rank);
  return Status::OK();
}

std::string PendingPath(const std::string& run_dir) { return run_dir + "/" + kPendingRollbackFile; }

// Durably, before RUN_DIR's first change: what resume must finish.
Status WritePendingMarker(const std::string& run_dir, int64_t step) {
  nlohmann::json marker;
  marker["schema"] = "dgrr.rollback-pending/1";
  marker["step"] = step;
  return WriteFileAtomically(PendingPath(run_dir), marker.dump() + "\n");
}

Status RemovePendingMarker(const std::string& run_dir) {
  const std::string path = PendingPath(run_dir);
  DGRR_RETURN_IF_ERROR(RemoveFile(path));
  return SyncDirectory(run_dir);
}

// The newest good checkpoint at or before `step`; nullopt when there is none.
StatusOr<std::optional<checkpoint::Checkpoint>> NewestGoodCheckpoint(
    const std::string& run_dir, uint64_t step, bool fallback, std::vector<std::string>* skipped) {
  auto found = checkpoint::FindNewestGoodCheckpoint(run_dir, step, fallback, skipped);
  if (!found.ok() && found.status().IsNotFound()) return std::optional<checkpoint::Checkpoint>();
  if (!found.ok()) return found.status();
  return std::optional<checkpoint::Checkpoint>(std::move(found).value());
}


// Stage 4: checkpoints after `step` and temporaries a killed writer left.
Status RemoveLaterCheckpoints(const RollbackOptions& options, RollbackResult* result) {
  DGRR_ASSIGN_OR_RETURN(std::vector<uint64_t> steps, checkpoint::ListCheckpointSteps(options.run_dir));
  const std::string dir = options.run_dir + "/ckpt";
  for (uint64_t later : steps) {
    if (later <= static_cast<uint64_t>(options.step)) continue;
    const std::string path = checkpoint::CheckpointPath(options.run_dir, later);
    DGRR_RETURN_IF_ERROR(RemoveFile(path));
    // Its shards, once the manifest (what makes it a checkpoint) is gone; a
    // kill in between leaves them as uncommitted shards, which the next
    // rollback or resume removes as temporaries.
    const std::string shard_prefix = std::filesystem::path(checkpoint::ShardPath(path, 0)).filename().string();
    const std::string prefix = shard_prefix.substr(0, shard_prefix.find(".rank-") + 6);
    DGRR_ASSIGN_OR_RETURN(std::vector<std::string> names, ListDirectory(dir));
    for (const std::string& name : names) {
      if (name.rfind(prefix, 0) != 0 || name.size() < 3 || name.compare(name.size() - 3, 3, ".h5") != 0) continue;
      if (Status s = RemoveFile(dir + "/" + name); !s.ok() && !s.IsNotFound()) return s;
      ++result->removed_checkpoint_shards;
    }
    DGRR_RETURN_IF_ERROR(SyncDirectory(dir));
    result->removed_checkpoints.push_back(later);
    KillPoint("rollback-remove", static_cast<int64_t>(later));
    if (options.interrupt) {
      DGRR_RETURN_IF_ERROR(options.interrupt(RollbackStage::kCheckpointRemoved, static_cast<int64_t>(later)));
    }
  }
  DGRR_ASSIGN_OR_RETURN(result->removed_temporaries, checkpoint::RemoveStaleTemporaries(options.run_dir));
  return Status::OK();
}

}  // namespace

StatusOr<std::optional<int64_t>> PendingRollback(const std::string& run_dir) {
  const std::string path = PendingPath(run_dir);
  if (::access(path.c_str(), F_OK) != 0) {
    if (errno == ENOENT) return std::optional<int64_t>();
    return Status::FromErrno("access", path, errno);
  }
  DGRR_ASSIGN_OR_RETURN(const nlohmann::json marker, ReadJsonFile(path));
  if (!marker.is_object()) return Status::Corruption(path + ": not a rollback marker (expected {\"step\": S})");
  DGRR_ASSIGN_OR_RETURN(const int64_t step,
                        JsonObjectReader(marker, path).Int("step", 0, std::numeric_limits<int64_t>::max()));
  return std::optional<int64_t>(step);
}

StatusOr<RollbackResult> RollBackRun(const RollbackOptions& options, int world_size,
                                     RollbackReexecutor& reexecutor) {
  if (options.step < 0) {
    return Status::InvalidArgument("--step must not be negative, got " + std::to_string(options.step));
  }
  const uint64_t step = static_cast<uint64_t>(options.step);
  RollbackResult result;
  result.step = options.step;
  result.checkpoint_path = checkpoint::CheckpointPath(options.run_dir, step);

  // Where every rank's trace must be cut, and how far the run got.
  std::vector<TraceScan> scans;
  int64_t reachable = INT64_MAX;
  for (int r = 0; r < world_size; ++r) {
    DGRR_ASSIGN_OR_RETURN(TraceScan scan, ScanTrace(TracePathFor(options.run_dir, r), step));
    result.previous_last_step = std::max(result.previous_last_step, scan.last_completed);
    reachable = std::min(reachable, scan.last_completed);
    scans.push_back(scan);
  }
  for (int r = 0; r < world_size; ++r) {
    if (!scans[r].step_end) {
      return Status::InvalidArgument(
          "step " + std::to_string(step) + " is beyond the run's last recorded step " +
          std::to_string(reachable) + (reachable < 0 ? " (no step recorded)" : "") + " (rank " +
          std::to_string(r) + "'s trace has no end of step " + std::to_string(step) + ")");
    }
  }

  // Stage 1: the state after step S.
  DGRR_ASSIGN_OR_RETURN(std::optional<checkpoint::Checkpoint> newest,
                        NewestGoodCheckpoint(options.run_dir, step, options.fallback,
                                             &result.skipped_checkpoints));
  if (newest) result.from_checkpoint = newest->meta.step;
  checkpoint::Checkpoint state;
  if (newest && newest->meta.step == step) {
    state = std::move(*newest);
  } else {
    DGRR_ASSIGN_OR_RETURN(state, reexecutor.StateAfter(options, newest, &result));
  }
  if (state.meta.world_size != world_size) {
    return Status::Corruption(state.path + ": written by " + std::to_string(state.meta.world_size) +
                              " ranks, the run has " + std::to_string(world_size));
  }

  // Stage 2: the checkpoint at S, with the trace positions resume must cut at
  // (just past the EVENT of stage 3) and the run's own id. RUN_DIR's own
  // checkpoint of S already has them (its CHECKPOINT EVENT sits where the
  // rollback EVENT will) and is left alone.
  std::vector<uint64_t> positions;
  for (const TraceScan& scan : scans) positions.push_back(*scan.step_end + 2);
  DGRR_RETURN_IF_ERROR(WritePendingMarker(options.run_dir, options.step));
  KillPoint("rollback-begun", options.step);
  checkpoint::CheckpointMeta meta = state.meta;
  meta.run_id_hex = RunIdHex(scans[0].run_id);
  bool fits = state.path == result.checkpoint_path;
  for (int r = 0; r < world_size && fits; ++r) fits = state.ranks[r].trace_position == positions[r];
  if (!fits) {
    DGRR_RETURN_IF_ERROR(checkpoint::RewriteCheckpoint(state, result.checkpoint_path, meta, positions));
    result.checkpoint_written = true;
  }
  KillPoint("rollback-ckpt", options.step);
  if (options.interrupt) DGRR_RETURN_IF_ERROR(options.interrupt(RollbackStage::kCheckpointWritten, 0));

  // Stage 3: cut every trace after step S's end and record the rollback.
  const std::string payload = "to step " + std::to_string(step) + ", from step " +
                              std::to_string(result.previous_last_step);
  for (int r = 0; r < world_size; ++r) {
    const TraceScan& scan = scans[r];
    RollbackRankResult rank{r, *scan.step_end + 1, false};
    const bool done = scan.rolled_back_event_at_cut && scan.records == rank.cut_at + 1;
    const std::string path = TracePathFor(options.run_dir, r);
    if (done) {
      rank.already_cut = true;
      // Drop a torn tail an interrupted append may have left after the EVENT.
      if (scan.torn_tail_bytes > 0) DGRR_RETURN_IF_ERROR(trace::TruncateTraceAt(path, rank.cut_at + 1));
    } else {
      DGRR_RETURN_IF_ERROR(CutTraceAndRecordEvent(path, r, rank.cut_at, step, payload));
    }
    result.ranks.push_back(rank);
    if (options.interrupt) DGRR_RETURN_IF_ERROR(options.interrupt(RollbackStage::kTraceCut, r));
  }

  // The metrics log follows the traces (re-runnable: cutting twice is a no-op).
  DGRR_RETURN_IF_ERROR(CutMetricsLog(MetricsPathFor(options.run_dir), step));

  // Stage 4: only now may the later checkpoints go.
  DGRR_RETURN_IF_ERROR(RemoveLaterCheckpoints(options, &result));
  DGRR_RETURN_IF_ERROR(RemovePendingMarker(options.run_dir));
  return result;
}

}  // namespace dgrr::replay
