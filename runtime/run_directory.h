// RunDirectory: a run's directory as the programs that write it see it
// (docs/run-directory.md). It owns what every writer of a run does the same
// way, whichever program it is (`dgrr train`, a Session of any program):
//   - the writer lock (base/run_lock.h): one writer per run, taken by Lock();
//   - the run's files by name (rank<R>.trace, rank<R>.env.json, config.json,
//     metrics.jsonl, an unfinished rollback's marker) and config.json's I/O;
//   - what the resume point must satisfy besides reading and verifying:
//     every rank's trace still reaches it (ScanTraceEnd, TraceEnd::
//     Unreachable; each rank checks its own and Session::Resume makes the
//     ranks agree before any of them cuts);
//   - cutting the run back to a checkpoint: the traces (CutTrace), what
//     writers killed mid-write left (RemoveTemporaries) and the metrics log
//     (CutMetricsLog).
// A Session is given one (SessionSeams::directory, runtime/session_seams.h)
// or makes its own over SessionOptions::run_dir; the trainer holds one for the whole run, so that
// its sessions find the lock held and take it nowhere else.
//
// Not thread-safe; the lock is the process's until Unlock or destruction.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>

#include "base/run_lock.h"
#include "base/status.h"

namespace dgrr {

class CheckpointStore;
class LoadedCheckpoint;

// File names inside a run directory (docs/run-directory.md).
// The marker an unfinished rollback leaves (replay/rollback.h): a resume
// must not continue from a half-rolled-back run.
inline constexpr const char* kPendingRollbackFile = "rollback-pending.json";
std::string TracePathFor(const std::string& run_dir, int rank);
std::string EnvPathFor(const std::string& run_dir, int rank);
std::string ConfigPathFor(const std::string& run_dir);

// Where one rank's trace ends, as far as resuming cares: how many records it
// holds and the EVENT records a checkpoint may point just past (record
// index -> the step it was recorded in).
struct TraceEnd {
  uint64_t records = 0;
  std::map<uint64_t, uint64_t> events;
  // "" when this trace, rank `rank`'s, reaches `ckpt`: the position `ckpt`
  // records for the rank lies within the trace, just past an EVENT of the
  // checkpoint's step (its CHECKPOINT event, or a rollback's ROLLED_BACK);
  // a position of 0 (recorded in mode off) is always reached. Else why not.
  std::string Unreachable(const LoadedCheckpoint& ckpt, int rank) const;
};

class RunDirectory {
 public:
  explicit RunDirectory(std::string path) : path_(std::move(path)) {}
  RunDirectory(const RunDirectory&) = delete;
  RunDirectory& operator=(const RunDirectory&) = delete;

  const std::string& path() const { return path_; }
  std::string TracePath(int rank) const { return TracePathFor(path_, rank); }
  std::string EnvPath(int rank) const { return EnvPathFor(path_, rank); }
  std::string ConfigPath() const { return ConfigPathFor(path_); }
  std::string MetricsPath() const;

  // --- The writer lock ---
  // Creates the directory when it does not exist (InvalidArgument when the
  // path is something else) and takes its writer lock, unless this object
  // holds it already. IOError naming the holder when another writer has it;
  // nothing is written either way.
  Status Lock();
  // The same for a directory that must exist already (a run to roll back):
  // RunLock::Acquire's error when it does not.
  Status LockExisting();
  bool locked() const { return lock_.has_value(); }
  void Unlock() { lock_.reset(); }

  // --- Files ---
  bool HasConfig() const;
  // config.json, written atomically (write, fsync, rename).
  Status WriteConfig(const std::string& text) const;
  // An unfinished rollback's marker is there (kPendingRollbackFile).
  bool HasPendingRollback() const;

  // --- Resuming: the resume point and cutting back to it ---
  // --- Resuming: the resume point and cutting back to it ---
  // Reads rank `rank`'s trace to its end (a torn tail ends it; corruption is
  // an error): where it ends, for TraceEnd::Unreachable. Each rank reads its
  // own; Session::Resume gathers the verdicts.
  StatusOr<TraceEnd> ScanTraceEnd(int rank) const;
  // Cuts rank `rank`'s trace to the records before `checkpoint`'s position
  // for it (kill point "resume-cut", N = rank, once cut).
  Status CutTrace(int rank, const LoadedCheckpoint& checkpoint) const;
  // Removes what checkpoint writers killed mid-write left behind.
  Status RemoveTemporaries(CheckpointStore& store) const;
  // Cuts metrics.jsonl (when there is one) to steps 0..step.
  Status CutMetricsLog(uint64_t step) const;

 private:
  std::string path_;
  std::optional<RunLock> lock_;
};

}  // namespace dgrr
