#include "base/run_lock.h"

#include <fcntl.h>
#include <pthread.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cinttypes>
#include <cstdio>
#include <mutex>
#include <utility>
#include <vector>

namespace dgrr {
namespace {

// The descriptors of the locks this process holds. A forked child (a
// DataLoader worker, a subprocess before its exec) shares each descriptor's
// open file description, and with it the flock: without this, a child still
// alive kept the run locked after its parent released it (a Python script
// whose loader workers outlived the session could not open the run again).
// The child closes its copies at once (pthread_atfork), which releases
// nothing the parent holds. Slots, not a container: the child handler runs
// in a process where another thread may have held any lock at the fork.
constexpr int kLockSlots = 64;
std::atomic<int> held_fds[kLockSlots];
std::once_flag atfork_once;

void CloseHeldLocksInChild() {
  for (auto& slot : held_fds) {
    const int fd = slot.exchange(-1);
    if (fd >= 0) ::close(fd);
  }
}

void RememberHeld(int fd) {
  std::call_once(atfork_once, [] {
    for (auto& slot : held_fds) slot.store(-1);
    ::pthread_atfork(nullptr, nullptr, CloseHeldLocksInChild);
  });
  for (auto& slot : held_fds) {
    int empty = -1;
    if (slot.compare_exchange_strong(empty, fd)) return;
  }
  // More than kLockSlots runs locked at once: this one stays shared with children.
}

void ForgetHeld(int fd) {
  for (auto& slot : held_fds) {
    int expected = fd;
    if (slot.compare_exchange_strong(expected, -1)) return;
  }
}

// /proc/locks in as few read(2) calls as it takes, from the start: a
// seq_file regenerates its text at every call, so reading it at offsets
// (pread, as the file layer does) while other processes take and drop locks
// splices lines of two different tables. Not dgrr's file: read directly.
std::string ReadLockTable() {
  const int fd = ::open("/proc/locks", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return "";
  std::string text;
  std::vector<char> buffer(1 << 20);
  for (;;) {
    const ssize_t n = ::read(fd, buffer.data(), buffer.size());
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0 || text.size() > (size_t{16} << 20)) break;
    text.append(buffer.data(), static_cast<size_t>(n));
  }
  ::close(fd);
  return text;
}

// The pid holding a flock on the file behind `fd`, from the kernel's table
// of locks ("1: FLOCK  ADVISORY  WRITE 4242 08:01:1311 0 EOF"); "" when it
// cannot be told (no /proc, or a holder in another pid namespace).
std::string HolderPid(int fd) {
  struct stat st;
  if (::fstat(fd, &st) != 0) return "";
  const std::string text = ReadLockTable();
  for (size_t begin = 0; begin < text.size();) {
    size_t end = text.find('\n', begin);
    if (end == std::string::npos) end = text.size();
    const std::string line = text.substr(begin, end - begin);
    begin = end + 1;
    char kind[16] = {}, mode[16] = {}, access[16] = {};
    long pid = 0;
    unsigned major_id = 0, minor_id = 0;
    uintmax_t inode = 0;
    // "ID: FLOCK ADVISORY WRITE PID MAJ:MIN:INODE ..."; blocked waiters ("->") do not parse.
    if (std::sscanf(line.c_str(), "%*d: %15s %15s %15s %ld %x:%x:%" SCNuMAX, kind, mode, access, &pid,
                    &major_id, &minor_id, &inode) != 7) {
      continue;
    }
    if (std::string(kind) == "FLOCK" && inode == static_cast<uintmax_t>(st.st_ino) &&
        major_id == major(st.st_dev) && minor_id == minor(st.st_dev) && pid > 0) {
      return std::to_string(pid);
    }
  }
  return "";
}

}  // namespace

StatusOr<RunLock> RunLock::Acquire(const std::string& run_dir) {
  const int fd = ::open(run_dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return Status::FromErrno("open run directory", run_dir, errno);
  int rc;
  do {
    rc = ::flock(fd, LOCK_EX | LOCK_NB);
  } while (rc != 0 && errno == EINTR);
  if (rc != 0) {
    const int err = errno;
    if (err != EWOULDBLOCK) {
      ::close(fd);
      return Status::FromErrno("lock", run_dir, err);
    }
    const std::string pid = HolderPid(fd);
    ::close(fd);
    return Status::IOError(run_dir + " is in use by another dgrr writer (" +
                           (pid.empty() ? std::string("pid unknown") : "pid " + pid) +
                           "); wait for it to finish");
  }
  RememberHeld(fd);
  return RunLock(fd, run_dir);
}

RunLock::RunLock(RunLock&& other) noexcept
    : fd_(std::exchange(other.fd_, -1)), dir_(std::move(other.dir_)) {}

RunLock& RunLock::operator=(RunLock&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) {
      ForgetHeld(fd_);
      ::close(fd_);
    }
    fd_ = std::exchange(other.fd_, -1);
    dir_ = std::move(other.dir_);
  }
  return *this;
}

// Closing the descriptor releases the flock.
RunLock::~RunLock() {
  if (fd_ >= 0) {
    ForgetHeld(fd_);
    ::close(fd_);
  }
}

}  // namespace dgrr
