// RunDirectory: a run's directory as the programs that write it see it
// (docs/run-directory.md). It owns what every writer of a run does the same
// way, whichever program it is (`dgrr train`, a Session of any program):
//   - the writer lock (base/run_lock.h): one writer per run, taken by Lock();
//   - the run's files by name (rank<R>.trace, rank<R>.env.json, config.json,
//     metrics.jsonl, an unfinished rollback's marker) and config.json's I/O;
//   - the resume point: the newest checkpoint that reads and verifies *and*
//     that every rank's trace still reaches (FindResumePoint);
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
  // The newest checkpoint in `store` that reads and verifies and that the
  // traces of ranks 0..world_size-1 still reach: each rank's recorded trace
  // position lies within its trace, just past an EVENT of the checkpoint's
  // step (the CHECKPOINT event, or a rollback's ROLLED_BACK event). A trace
  // cut shorter since (an interrupted rollback, a user's truncation) fails
  // that. Without `fallback` a damaged or unreachable newest checkpoint is
  // refused (Corruption); with it, older ones are tried. NotFound: none.
  // Reads every rank's trace: call it before any rank cuts its own.
  StatusOr<std::unique_ptr<LoadedCheckpoint>> FindResumePoint(CheckpointStore& store, int world_size,
                                                              bool fallback) const;
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
