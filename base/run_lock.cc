#include "base/run_lock.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <utility>

namespace dgrr {
namespace {

// The pid the holder wrote, for the message only ("" when it has not yet
// written it, or the file holds something else).
std::string HolderPid(int fd) {
  char buf[32] = {};
  const ssize_t n = ::pread(fd, buf, sizeof buf - 1, 0);
  if (n <= 0) return "";
  std::string pid;
  for (ssize_t i = 0; i < n && buf[i] >= '0' && buf[i] <= '9'; ++i) pid += buf[i];
  return pid;
}

}  // namespace

StatusOr<RunLock> RunLock::Acquire(const std::string& run_dir) {
  std::string path = run_dir + "/" + kFileName;
  // No O_TRUNC: a refused writer must not touch the holder's pid.
  const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) return Status::FromErrno("open lock file", path, errno);
  int rc;
  do {
    rc = ::flock(fd, LOCK_EX | LOCK_NB);
  } while (rc != 0 && errno == EINTR);
  if (rc != 0) {
    const int err = errno;
    if (err != EWOULDBLOCK) {
      ::close(fd);
      return Status::FromErrno("lock", path, err);
    }
    const std::string pid = HolderPid(fd);
    ::close(fd);
    return Status::IOError(run_dir + " is in use by another dgrr writer (" +
                           (pid.empty() ? std::string("pid unknown") : "pid " + pid) +
                           ", lock " + path + "); wait for it to finish");
  }
  // Ours now: record our pid for the message a refused writer prints.
  const std::string pid = std::to_string(::getpid()) + "\n";
  if (::ftruncate(fd, 0) != 0 || ::pwrite(fd, pid.data(), pid.size(), 0) != static_cast<ssize_t>(pid.size())) {
    const int err = errno;
    ::close(fd);
    return Status::FromErrno("write lock file", path, err);
  }
  return RunLock(fd, std::move(path));
}

RunLock::RunLock(RunLock&& other) noexcept
    : fd_(std::exchange(other.fd_, -1)), path_(std::move(other.path_)) {}

RunLock& RunLock::operator=(RunLock&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = std::exchange(other.fd_, -1);
    path_ = std::move(other.path_);
  }
  return *this;
}

// Closing the descriptor releases the flock. The pid stays in the file: it
// is read only while the lock is held, and removing the file is unsafe.
RunLock::~RunLock() {
  if (fd_ >= 0) ::close(fd_);
}

}  // namespace dgrr
