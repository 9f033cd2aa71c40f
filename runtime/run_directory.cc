#include "runtime/run_directory.h"

#include <map>
#include <variant>
#include <vector>

#include "base/file.h"
#include "base/file_system.h"
#include "base/kill_point.h"
#include "runtime/checkpoint_store.h"
#include "runtime/metrics_log.h"
#include "trace_format/reader.h"

namespace dgrr {
namespace {

// Where a rank's trace ends, and the EVENT records a checkpoint may point
// just past (index -> the step they were recorded in).
struct TraceEnd {
  uint64_t records = 0;
  std::map<uint64_t, uint64_t> events;
};

StatusOr<TraceEnd> ScanTraceEnd(const std::string& path) {
  DGRR_ASSIGN_OR_RETURN(auto reader, trace::TraceReader::Open(path));
  TraceEnd end;
  trace::Record record;
  for (;;) {
    bool done = false;
    DGRR_RETURN_IF_ERROR(reader->Next(&record, &done));
    if (done) break;
    if (const auto* e = std::get_if<trace::EventRecord>(&record.body)) end.events[record.index] = e->step;
  }
  end.records = reader->records_read();
  return end;
}

// Why the traces do not reach `ckpt` ("" when they do).
std::string Unreachable(const LoadedCheckpoint& ckpt, const std::vector<TraceEnd>& ends) {
  for (size_t r = 0; r < ends.size() && r < static_cast<size_t>(ckpt.world_size()); ++r) {
    const uint64_t p = ckpt.trace_position(static_cast<int>(r));
    if (p == 0) continue;  // mode off: nothing recorded
    auto it = ends[r].events.find(p - 1);
    if (p <= ends[r].records && it != ends[r].events.end() && it->second == ckpt.step()) continue;
    return ckpt.path() + " records trace position " + std::to_string(p) + " for rank " + std::to_string(r) +
           ", which the trace (" + std::to_string(ends[r].records) + " records) does not reach";
  }
  return "";
}

}  // namespace

std::string TracePathFor(const std::string& run_dir, int rank) {
  return run_dir + "/rank" + std::to_string(rank) + ".trace";
}
std::string EnvPathFor(const std::string& run_dir, int rank) {
  return run_dir + "/rank" + std::to_string(rank) + ".env.json";
}
std::string ConfigPathFor(const std::string& run_dir) { return run_dir + "/config.json"; }

std::string RunDirectory::MetricsPath() const { return MetricsPathFor(path_); }

Status RunDirectory::Lock() {
  if (lock_) return Status::OK();
  if (PathExists(path_) && !IsDirectory(path_)) {
    return Status::InvalidArgument(path_ + " exists and is not a directory");
  }
  DGRR_RETURN_IF_ERROR(CreateDirectories(path_));
  return LockExisting();
}

Status RunDirectory::LockExisting() {
  if (lock_) return Status::OK();
  DGRR_ASSIGN_OR_RETURN(RunLock lock, RunLock::Acquire(path_));
  lock_.emplace(std::move(lock));
  return Status::OK();
}

bool RunDirectory::HasConfig() const { return PathExists(ConfigPath()); }

Status RunDirectory::WriteConfig(const std::string& text) const {
  return WriteFileAtomicallyIfChanged(ConfigPath(), text);
}

bool RunDirectory::HasPendingRollback() const { return PathExists(path_ + "/" + kPendingRollbackFile); }

StatusOr<std::unique_ptr<LoadedCheckpoint>> RunDirectory::FindResumePoint(CheckpointStore& store, int world_size,
                                                                         bool fallback) const {
  std::vector<TraceEnd> ends;
  for (int r = 0; r < world_size; ++r) {
    DGRR_ASSIGN_OR_RETURN(TraceEnd end, ScanTraceEnd(TracePath(r)));
    ends.push_back(std::move(end));
  }
  uint64_t bound = UINT64_MAX;
  for (;;) {
    DGRR_ASSIGN_OR_RETURN(std::unique_ptr<LoadedCheckpoint> ckpt, store.FindNewest(path_, fallback, bound));
    const std::string why = Unreachable(*ckpt, ends);
    if (why.empty()) return ckpt;
    if (!fallback) return Status::Corruption(why + " (pass --fallback to resume from an older checkpoint)");
    if (ckpt->step() == 0) return Status::NotFound(path_ + ": no checkpoint the traces reach (" + why + ")");
    bound = ckpt->step() - 1;
  }
}

Status RunDirectory::CutTrace(int rank, const LoadedCheckpoint& checkpoint) const {
  DGRR_RETURN_IF_ERROR(trace::TruncateTraceAt(TracePath(rank), checkpoint.trace_position(rank)));
  KillPoint("resume-cut", rank);
  return Status::OK();
}

Status RunDirectory::RemoveTemporaries(CheckpointStore& store) const { return store.RemoveTemporaries(path_); }

Status RunDirectory::CutMetricsLog(uint64_t step) const {
  return ::dgrr::CutMetricsLog(MetricsPath(), static_cast<int64_t>(step));
}

}  // namespace dgrr
