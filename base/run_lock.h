// One writer per run directory: an exclusive advisory lock (flock) on the
// run directory itself, held by every command that modifies the run (train,
// train --resume, rollback) for as long as it writes.
//
// The lock is taken on the directory, not on a file inside it, so taking it
// writes nothing: a refused writer, or a writer refused later for another
// reason (a directory that is not a run), leaves the directory exactly as it
// was, and no file of the user's can be mistaken for a lock and overwritten.
// The kernel releases the lock when its holder's descriptor closes, so a
// holder killed by SIGKILL never blocks the next writer. The holder's pid,
// for the refusal message, comes from the kernel's own table of locks
// (/proc/locks). Readers (verify, compare, replay, bisect, inspect) take no
// lock.
#pragma once

#include <string>

#include "base/status.h"

namespace dgrr {

class RunLock {
 public:
  // Locks the directory `run_dir` (which must exist) without waiting. Held
  // by another process (or another RunLock in this one): IOError naming the
  // run and the holder's pid, having written nothing.
  static StatusOr<RunLock> Acquire(const std::string& run_dir);

  RunLock(RunLock&& other) noexcept;
  RunLock& operator=(RunLock&& other) noexcept;
  RunLock(const RunLock&) = delete;
  RunLock& operator=(const RunLock&) = delete;
  ~RunLock();  // releases the lock

  const std::string& dir() const { return dir_; }

 private:
  RunLock(int fd, std::string dir) : fd_(fd), dir_(std::move(dir)) {}
  int fd_ = -1;
  std::string dir_;
};

}  // namespace dgrr
