// One writer per run directory: an exclusive advisory lock (flock) on
// RUN_DIR/lock, held by every command that modifies the run (train, train
// --resume, rollback) for as long as it writes.
//
// The kernel's flock is the truth, not the file: the lock is released when
// its holder's descriptor closes, so a holder killed by SIGKILL never blocks
// the next writer, and the file's content (the holder's pid) only feeds the
// refusal message. The file is never removed, not even by `train --force`:
// unlinking a locked file would let a third writer lock a fresh inode beside
// the holder. Readers (verify, compare, replay, bisect, inspect) take no lock.
#pragma once

#include <string>

#include "base/status.h"

namespace dgrr {

class RunLock {
 public:
  // The lock file's name inside a run directory.
  static constexpr const char* kFileName = "lock";

  // Locks `run_dir` (which must exist) without waiting. Held by another
  // process (or another RunLock in this one): IOError naming the run and the
  // holder's pid, having written nothing.
  static StatusOr<RunLock> Acquire(const std::string& run_dir);

  RunLock(RunLock&& other) noexcept;
  RunLock& operator=(RunLock&& other) noexcept;
  RunLock(const RunLock&) = delete;
  RunLock& operator=(const RunLock&) = delete;
  ~RunLock();  // releases the lock

  const std::string& path() const { return path_; }

 private:
  RunLock(int fd, std::string path) : fd_(fd), path_(std::move(path)) {}
  int fd_ = -1;
  std::string path_;
};

}  // namespace dgrr
