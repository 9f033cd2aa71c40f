#include "base/file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <filesystem>

namespace dgrr {
namespace {

class PosixWritableFile final : public WritableFile {
 public:
  PosixWritableFile(std::string path, int fd) : path_(std::move(path)), fd_(fd) {}
  ~PosixWritableFile() override {
    if (fd_ >= 0) ::close(fd_);
  }
  PosixWritableFile(const PosixWritableFile&) = delete;
  PosixWritableFile& operator=(const PosixWritableFile&) = delete;

  Status Append(const void* data, size_t n) override {
    if (fd_ < 0) return Status::IOError(path_ + ": append after close");
    const char* p = static_cast<const char*>(data);
    while (n > 0) {
      ssize_t w = ::write(fd_, p, n);
      if (w < 0) {
        if (errno == EINTR) continue;
        return Status::FromErrno("write", path_, errno);
      }
      p += w;
      n -= static_cast<size_t>(w);
    }
    return Status::OK();
  }
  Status Flush() override { return Status::OK(); }
  Status Sync() override {
    if (fd_ < 0) return Status::IOError(path_ + ": sync after close");
    if (::fsync(fd_) != 0) return Status::FromErrno("fsync", path_, errno);
    return Status::OK();
  }
  Status Close() override {
    if (fd_ < 0) return Status::OK();
    int rc = ::close(fd_);
    fd_ = -1;
    if (rc != 0) return Status::FromErrno("close", path_, errno);
    return Status::OK();
  }
  const std::string& path() const override { return path_; }

 private:
  std::string path_;
  int fd_;
};

}  // namespace

StatusOr<std::unique_ptr<WritableFile>> OpenWritableFile(const std::string& path, bool truncate) {
  int flags = O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC | (truncate ? O_TRUNC : 0);
  int fd = ::open(path.c_str(), flags, 0644);
  if (fd < 0) return Status::FromErrno("open for writing", path, errno);
  return std::unique_ptr<WritableFile>(new PosixWritableFile(path, fd));
}

std::string DirName(const std::string& path) {
  auto parent = std::filesystem::path(path).parent_path();
  return parent.empty() ? std::string(".") : parent.string();
}

std::string TemporaryPathFor(const std::string& path) {
  static std::atomic<uint64_t> counter{0};
  return path + ".tmp." + std::to_string(::getpid()) + "." + std::to_string(counter++);
}

StatusOr<ScratchDirectory> ScratchDirectory::Create(const std::string& prefix, const std::string& parent) {
  std::string base = parent;
  if (base.empty()) {
    std::error_code ec;
    base = std::filesystem::temp_directory_path(ec).string();
    if (ec) return Status::IOError("no temporary directory: " + ec.message());
  }
  DGRR_RETURN_IF_ERROR(CreateDirectories(base));
  std::string name = base + "/" + prefix + "-XXXXXX";
  if (::mkdtemp(name.data()) == nullptr) return Status::FromErrno("create scratch directory", base, errno);
  return ScratchDirectory(std::move(name));
}

ScratchDirectory::~ScratchDirectory() {
  if (path_.empty()) return;
  std::error_code ec;
  std::filesystem::remove_all(path_, ec);
}

bool IsTemporaryName(const std::string& name) { return name.find(".tmp.") != std::string::npos; }

Status SyncDirectory(const std::string& dir) {
  int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return Status::FromErrno("open directory", dir, errno);
  int rc = ::fsync(fd);
  int err = errno;
  ::close(fd);
  if (rc != 0) return Status::FromErrno("fsync directory", dir, err);
  return Status::OK();
}

Status CommitFileAtomically(const std::string& path,
                            const std::function<Status(const std::string& tmp_path)>& fill) {
  const std::string tmp = TemporaryPathFor(path);
  Status s = fill(tmp);
  if (s.ok()) {
    // fill() may have closed its handle; fsync through a fresh descriptor.
    int fd = ::open(tmp.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
      s = Status::FromErrno("open for fsync", tmp, errno);
    } else {
      if (::fsync(fd) != 0) s = Status::FromErrno("fsync", tmp, errno);
      ::close(fd);
    }
  }
  if (s.ok() && ::rename(tmp.c_str(), path.c_str()) != 0) {
    s = Status::FromErrno("rename into place", path, errno);
  }
  if (!s.ok()) {
    ::unlink(tmp.c_str());
    return s;
  }
  return SyncDirectory(DirName(path));
}

Status WriteFileAtomically(const std::string& path, std::string_view data) {
  return CommitFileAtomically(path, [&](const std::string& tmp) -> Status {
    auto file = OpenWritableFile(tmp, /*truncate=*/true);
    if (!file.ok()) return file.status();
    DGRR_RETURN_IF_ERROR((*file)->Append(data.data(), data.size()));
    return (*file)->Close();
  });
}

StatusOr<std::string> ReadFileToString(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return Status::FromErrno("open for reading", path, errno);
  std::string out;
  char buf[1 << 16];
  for (;;) {
    ssize_t r = ::read(fd, buf, sizeof buf);
    if (r < 0) {
      if (errno == EINTR) continue;
      int err = errno;
      ::close(fd);
      return Status::FromErrno("read", path, err);
    }
    if (r == 0) break;
    out.append(buf, static_cast<size_t>(r));
  }
  ::close(fd);
  return out;
}

StatusOr<uint64_t> FileSize(const std::string& path) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) return Status::FromErrno("stat", path, errno);
  return static_cast<uint64_t>(st.st_size);
}

bool PathExists(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0;
}

bool IsDirectory(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

Status CreateDirectories(const std::string& dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return Status::IOError(dir + ": create directory: " + ec.message());
  return Status::OK();
}

Status TruncateFile(const std::string& path, uint64_t size) {
  int fd = ::open(path.c_str(), O_WRONLY | O_CLOEXEC);
  if (fd < 0) return Status::FromErrno("open for truncation", path, errno);
  Status s;
  if (::ftruncate(fd, static_cast<off_t>(size)) != 0) {
    s = Status::FromErrno("truncate", path, errno);
  } else if (::fsync(fd) != 0) {
    s = Status::FromErrno("fsync", path, errno);
  }
  ::close(fd);
  return s;
}

}  // namespace dgrr
