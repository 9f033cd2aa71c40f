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

StatusOr<TraceEnd> ScanTraceEndAt(const std::string& path) {
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

}  // namespace

std::string TraceEnd::Unreachable(const LoadedCheckpoint& ckpt, int rank) const {
  const uint64_t p = ckpt.trace_position(rank);
  if (p == 0) return "";  // mode off: nothing recorded
  auto it = events.find(p - 1);
  if (p <= records && it != events.end() && it->second == ckpt.step()) return "";
  return ckpt.path() + " records trace position " + std::to_string(p) + " for rank " + std::to_string(rank) +
         ", which the trace (" + std::to_string(records) + " records) does not reach";
}

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

StatusOr<TraceEnd> RunDirectory::ScanTraceEnd(int rank) const { return ScanTraceEndAt(TracePath(rank)); }

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
