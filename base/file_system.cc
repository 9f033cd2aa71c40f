#include "base/file_system.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>

#include "base/environment.h"
#include "base/file.h"

namespace dgrr {
namespace {

// What fstat found where a regular file was expected, for the refusal.
const char* KindOf(mode_t mode) {
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISSOCK(mode)) return "a socket";
  return "not a regular file";
}

// Opens `path` read-only without ever blocking (a FIFO with no writer would
// block a plain open) and refuses anything but a regular file.
StatusOr<int> OpenRegularForReading(const std::string& path, uint64_t* size) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) return Status::FromErrno("open for reading", path, errno);
  struct stat st;
  if (::fstat(fd, &st) != 0) {
    const int err = errno;
    ::close(fd);
    return Status::FromErrno("stat", path, err);
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    return Status::Corruption(path + ": " + KindOf(st.st_mode) + ", not a regular file: refused");
  }
  // Regular files ignore O_NONBLOCK; clear it anyway so reads mean what they say.
  ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) & ~O_NONBLOCK);
  *size = static_cast<uint64_t>(st.st_size);
  return fd;
}

StatusOr<size_t> PreadFully(int fd, const std::string& path, void* dst, size_t n, uint64_t offset) {
  auto* p = static_cast<uint8_t*>(dst);
  size_t got = 0;
  while (got < n) {
    const ssize_t r = ::pread(fd, p + got, n - got, static_cast<off_t>(offset + got));
    if (r < 0) {
      if (errno == EINTR) continue;
      return Status::FromErrno("read", path, errno);
    }
    if (r == 0) break;
    got += static_cast<size_t>(r);
  }
  return got;
}

Status WriteFully(int fd, const std::string& path, const char* p, size_t n, const char* op) {
  while (n > 0) {
    const ssize_t w = ::write(fd, p, n);
    if (w < 0) {
      if (errno == EINTR) continue;
      return Status::FromErrno(op, path, errno);
    }
    p += w;
    n -= static_cast<size_t>(w);
  }
  return Status::OK();
}

class PosixWritableFile final : public WritableFile {
 public:
  // Owns `fd`.
  PosixWritableFile(std::string path, int fd) : path_(std::move(path)), fd_(fd) {}
  ~PosixWritableFile() override {
    if (fd_ >= 0) ::close(fd_);
  }
  PosixWritableFile(const PosixWritableFile&) = delete;
  PosixWritableFile& operator=(const PosixWritableFile&) = delete;

  Status Append(const void* data, size_t n) override {
    if (fd_ < 0) return Status::IOError(path_ + ": append after close");
    return WriteFully(fd_, path_, static_cast<const char*>(data), n, "write");
  }
  Status Flush() override { return Status::OK(); }
  Status Sync() override {
    if (fd_ < 0) return Status::IOError(path_ + ": sync after close");
    if (::fsync(fd_) != 0) return Status::FromErrno("fsync", path_, errno);
    return Status::OK();
  }
  Status Close() override {
    if (fd_ < 0) return Status::OK();
    const int rc = ::close(fd_);
    fd_ = -1;
    if (rc != 0) return Status::FromErrno("close", path_, errno);
    return Status::OK();
  }
  const std::string& path() const override { return path_; }

 private:
  std::string path_;
  int fd_;
};

class PosixRandomAccessFile final : public RandomAccessFile {
 public:
  // Owns `fd`.
  PosixRandomAccessFile(std::string path, int fd, uint64_t size_at_open)
      : path_(std::move(path)), fd_(fd), size_at_open_(size_at_open) {}
  ~PosixRandomAccessFile() override { ::close(fd_); }
  PosixRandomAccessFile(const PosixRandomAccessFile&) = delete;
  PosixRandomAccessFile& operator=(const PosixRandomAccessFile&) = delete;

  StatusOr<size_t> Read(uint64_t offset, size_t n, void* dst) override {
    return PreadFully(fd_, path_, dst, n, offset);
  }
  StatusOr<uint64_t> Size() override {
    struct stat st;
    if (::fstat(fd_, &st) != 0) return Status::FromErrno("stat", path_, errno);
    return static_cast<uint64_t>(st.st_size);
  }
  const std::string& path() const override { return path_; }
  uint64_t size_at_open() const override { return size_at_open_; }
  bool reads_may_overlap() const override { return true; }  // pread: no shared offset

 private:
  std::string path_;
  int fd_;
  uint64_t size_at_open_;
};

class PosixFileSystem final : public FileSystem {
 public:
  StatusOr<std::unique_ptr<WritableFile>> NewWritableFile(const std::string& path,
                                                          bool truncate) override {
    const int flags = O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC | (truncate ? O_TRUNC : 0);
    const int fd = ::open(path.c_str(), flags, 0644);
    if (fd < 0) return Status::FromErrno("open for writing", path, errno);
    return std::unique_ptr<WritableFile>(new PosixWritableFile(path, fd));
  }

  StatusOr<std::unique_ptr<RandomAccessFile>> NewRandomAccessFile(const std::string& path) override {
    uint64_t size = 0;
    DGRR_ASSIGN_OR_RETURN(int fd, OpenRegularForReading(path, &size));
    return std::unique_ptr<RandomAccessFile>(new PosixRandomAccessFile(path, fd, size));
  }

  StatusOr<std::string> ReadFile(const std::string& path, uint64_t max_bytes) override {
    uint64_t size = 0;
    DGRR_ASSIGN_OR_RETURN(int fd, OpenRegularForReading(path, &size));
    PosixRandomAccessFile file(path, fd, size);
    if (size > max_bytes) return TooLarge(path, size, max_bytes);
    // Read to the end, but never past one byte over the cap: a file that
    // grows while read is still refused, and one whose size fstat does not
    // know (procfs says 0) is still read whole.
    std::string out(static_cast<size_t>(std::min<uint64_t>(size, max_bytes) + 1), '\0');
    uint64_t got = 0;
    for (;;) {
      DGRR_ASSIGN_OR_RETURN(size_t n, file.Read(got, out.size() - got, out.data() + got));
      got += n;
      if (n == 0 || got > max_bytes) break;
      if (got == out.size()) {
        out.resize(static_cast<size_t>(std::min<uint64_t>(max_bytes + 1, 2 * out.size() + 4096)));
      }
    }
    if (got > max_bytes) return TooLarge(path, got, max_bytes);
    out.resize(static_cast<size_t>(got));
    return out;
  }

  Status WriteAt(const std::string& path, uint64_t offset, std::string_view data) override {
    const int fd = ::open(path.c_str(), O_WRONLY | O_CLOEXEC);
    if (fd < 0) return Status::FromErrno("open for writing", path, errno);
    Status s;
    size_t done = 0;
    while (done < data.size()) {
      const ssize_t w = ::pwrite(fd, data.data() + done, data.size() - done,
                                 static_cast<off_t>(offset + done));
      if (w < 0) {
        if (errno == EINTR) continue;
        s = Status::FromErrno("write", path, errno);
        break;
      }
      done += static_cast<size_t>(w);
    }
    if (::close(fd) != 0 && s.ok()) s = Status::FromErrno("close", path, errno);
    return s;
  }

  Status SyncFile(const std::string& path) override {
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return Status::FromErrno("open for fsync", path, errno);
    Status s;
    if (::fsync(fd) != 0) s = Status::FromErrno("fsync", path, errno);
    ::close(fd);
    return s;
  }

  Status Rename(const std::string& from, const std::string& to) override {
    if (::rename(from.c_str(), to.c_str()) != 0) return Status::FromErrno("rename into place", to, errno);
    return Status::OK();
  }

  Status Remove(const std::string& path) override {
    if (::unlink(path.c_str()) != 0 && errno != ENOENT) return Status::FromErrno("remove", path, errno);
    return Status::OK();
  }

  Status Truncate(const std::string& path, uint64_t size) override {
    const int fd = ::open(path.c_str(), O_WRONLY | O_CLOEXEC);
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

  Status SyncDirectory(const std::string& dir) override {
    const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) return Status::FromErrno("open directory", dir, errno);
    const int rc = ::fsync(fd);
    const int err = errno;
    ::close(fd);
    if (rc != 0) return Status::FromErrno("fsync directory", dir, err);
    return Status::OK();
  }

  StatusOr<std::vector<std::string>> ListDirectory(const std::string& dir) override {
    DIR* d = ::opendir(dir.c_str());
    if (d == nullptr) return Status::FromErrno("list", dir, errno);
    std::vector<std::string> names;
    errno = 0;
    while (const dirent* e = ::readdir(d)) {
      const std::string name = e->d_name;
      if (name != "." && name != "..") names.push_back(name);
      errno = 0;
    }
    const int err = errno;
    ::closedir(d);
    if (err != 0) return Status::FromErrno("list", dir, err);
    return names;
  }

  Status CreateDirectories(const std::string& dir) override {
    std::error_code ec;
    std::filesystem::create_directories(dir, ec);
    if (ec) return Status::IOError(dir + ": create directory: " + ec.message());
    return Status::OK();
  }

  StatusOr<uint64_t> FileSize(const std::string& path) override {
    struct stat st;
    if (::stat(path.c_str(), &st) != 0) return Status::FromErrno("stat", path, errno);
    return static_cast<uint64_t>(st.st_size);
  }

 private:
  static Status TooLarge(const std::string& path, uint64_t size, uint64_t max_bytes) {
    return Status::Corruption(path + ": " + std::to_string(size) + " bytes or more, larger than the " +
                              std::to_string(max_bytes) + "-byte limit for this kind of file: refused");
  }
};

// What Default() becomes when DGRR_TEST_FAULT cannot be parsed: every call
// fails with the reason, so a mistyped hook is seen at once, not ignored.
class RefusingFileSystem final : public FileSystem {
 public:
  explicit RefusingFileSystem(Status why) : why_(std::move(why)) {}
  StatusOr<std::unique_ptr<WritableFile>> NewWritableFile(const std::string&, bool) override { return why_; }
  StatusOr<std::unique_ptr<RandomAccessFile>> NewRandomAccessFile(const std::string&) override { return why_; }
  StatusOr<std::string> ReadFile(const std::string&, uint64_t) override { return why_; }
  Status WriteAt(const std::string&, uint64_t, std::string_view) override { return why_; }
  Status SyncFile(const std::string&) override { return why_; }
  Status Rename(const std::string&, const std::string&) override { return why_; }
  Status Remove(const std::string&) override { return why_; }
  Status Truncate(const std::string&, uint64_t) override { return why_; }
  Status SyncDirectory(const std::string&) override { return why_; }
  StatusOr<std::vector<std::string>> ListDirectory(const std::string&) override { return why_; }
  Status CreateDirectories(const std::string&) override { return why_; }
  StatusOr<uint64_t> FileSize(const std::string&) override { return why_; }

 private:
  Status why_;
};

// The test hook, read once: DGRR_TEST_FAULT unset means plain POSIX.
FileSystem* FileSystemFromEnvironment() {
  const std::string hook = GetEnvOrEmpty("DGRR_TEST_FAULT");
  if (hook.empty()) return FileSystem::Posix();
  StatusOr<FaultSpec> spec = FaultSpec::Parse(hook);
  if (!spec.ok()) {
    static RefusingFileSystem refusing(
        Status::InvalidArgument("DGRR_TEST_FAULT='" + std::string(hook) + "': " + spec.status().message()));
    return &refusing;
  }
  static FaultInjectingFileSystem injecting(FileSystem::Posix());
  injecting.SetFault(*spec);
  return &injecting;
}

std::atomic<FileSystem*> g_override{nullptr};

// A WritableFile whose calls pass through the injector first.
class FaultyWritableFile final : public WritableFile {
 public:
  FaultyWritableFile(FaultInjectingFileSystem* fs, std::unique_ptr<WritableFile> base)
      : fs_(fs), base_(std::move(base)) {}
  Status Append(const void* data, size_t n) override {
    bool short_write = false;
    if (int err = fs_->Intercept(FileOp::kAppend, path(), &short_write)) {
      if (short_write && n > 1) DGRR_RETURN_IF_ERROR(base_->Append(data, n / 2));
      return Status::FromErrno("write", path(), err);
    }
    return base_->Append(data, n);
  }
  Status Flush() override { return base_->Flush(); }
  Status Sync() override {
    bool unused = false;
    if (int err = fs_->Intercept(FileOp::kSync, path(), &unused)) return Status::FromErrno("fsync", path(), err);
    return base_->Sync();
  }
  Status Close() override {
    bool unused = false;
    if (int err = fs_->Intercept(FileOp::kClose, path(), &unused)) {
      (void)base_->Close();  // the descriptor is gone either way, as with close(2)
      return Status::FromErrno("close", path(), err);
    }
    return base_->Close();
  }
  const std::string& path() const override { return base_->path(); }

 private:
  FaultInjectingFileSystem* fs_;
  std::unique_ptr<WritableFile> base_;
};

class FaultyRandomAccessFile final : public RandomAccessFile {
 public:
  FaultyRandomAccessFile(FaultInjectingFileSystem* fs, std::unique_ptr<RandomAccessFile> base)
      : fs_(fs), base_(std::move(base)) {}
  StatusOr<size_t> Read(uint64_t offset, size_t n, void* dst) override {
    bool unused = false;
    if (int err = fs_->Intercept(FileOp::kRead, path(), &unused)) return Status::FromErrno("read", path(), err);
    return base_->Read(offset, n, dst);
  }
  StatusOr<uint64_t> Size() override {
    bool unused = false;
    if (int err = fs_->Intercept(FileOp::kSize, path(), &unused)) return Status::FromErrno("stat", path(), err);
    return base_->Size();
  }
  const std::string& path() const override { return base_->path(); }
  uint64_t size_at_open() const override { return base_->size_at_open(); }

 private:
  FaultInjectingFileSystem* fs_;
  std::unique_ptr<RandomAccessFile> base_;
};

class MemoryFile final : public RandomAccessFile {
 public:
  MemoryFile(std::string path, std::string bytes) : path_(std::move(path)), bytes_(std::move(bytes)) {}
  StatusOr<size_t> Read(uint64_t offset, size_t n, void* dst) override {
    if (offset >= bytes_.size()) return size_t{0};
    const size_t got = std::min<uint64_t>(n, bytes_.size() - offset);
    std::memcpy(dst, bytes_.data() + offset, got);
    return got;
  }
  StatusOr<uint64_t> Size() override { return static_cast<uint64_t>(bytes_.size()); }
  const std::string& path() const override { return path_; }

 private:
  std::string path_;
  std::string bytes_;
};

struct ErrnoName {
  const char* name;
  int value;
};
constexpr ErrnoName kErrnoNames[] = {{"ENOSPC", ENOSPC}, {"EIO", EIO},     {"EDQUOT", EDQUOT},
                                     {"EROFS", EROFS},   {"EFBIG", EFBIG}, {"EACCES", EACCES},
                                     {"ENOENT", ENOENT}, {"EINTR", EINTR}};

}  // namespace

const char* FileOpName(FileOp op) {
  switch (op) {
    case FileOp::kOpenWrite: return "open-write";
    case FileOp::kAppend: return "append";
    case FileOp::kSync: return "sync";
    case FileOp::kClose: return "close";
    case FileOp::kOpenRead: return "open-read";
    case FileOp::kRead: return "read";
    case FileOp::kWriteAt: return "write-at";
    case FileOp::kRename: return "rename";
    case FileOp::kRemove: return "remove";
    case FileOp::kTruncate: return "truncate";
    case FileOp::kSyncDirectory: return "sync-dir";
    case FileOp::kListDirectory: return "list";
    case FileOp::kCreateDirectory: return "mkdir";
    case FileOp::kSize: return "size";
  }
  return "?";
}

StatusOr<int> OpenRegularFileDescriptor(const std::string& path) {
  uint64_t size = 0;
  return OpenRegularForReading(path, &size);
}

FileSystem* FileSystem::Posix() {
  static PosixFileSystem posix;
  return &posix;
}

FileSystem* FileSystem::Default() {
  if (FileSystem* fs = g_override.load(std::memory_order_acquire)) return fs;
  static FileSystem* const from_environment = FileSystemFromEnvironment();
  return from_environment;
}

ScopedFileSystemOverride::ScopedFileSystemOverride(FileSystem* fs)
    : previous_(g_override.exchange(fs, std::memory_order_acq_rel)) {}

ScopedFileSystemOverride::~ScopedFileSystemOverride() {
  g_override.store(previous_, std::memory_order_release);
}

StatusOr<FaultSpec> FaultSpec::Parse(std::string_view text) {
  std::vector<std::string> parts;
  size_t start = 0;
  // The path fragment is everything after the third ':' (it may hold ':').
  for (int i = 0; i < 3; ++i) {
    const size_t colon = text.find(':', start);
    if (colon == std::string_view::npos) break;
    parts.emplace_back(text.substr(start, colon - start));
    start = colon + 1;
  }
  parts.emplace_back(text.substr(start));
  if (parts.size() < 3) return Status::InvalidArgument("expected OP[+short]:NTH:ERRNO[:PATH_FRAGMENT]");
  FaultSpec spec;
  std::string op = parts[0];
  if (const size_t plus = op.find('+'); plus != std::string::npos) {
    if (op.substr(plus) != "+short") return Status::InvalidArgument("unknown modifier '" + op.substr(plus) + "'");
    spec.short_write = true;
    op.resize(plus);
  }
  if (op == "any") {
    spec.any_op = true;
  } else {
    spec.any_op = false;
    bool found = false;
    for (int i = 0; i < kFileOpCount && !found; ++i) {
      if (op == FileOpName(static_cast<FileOp>(i))) {
        spec.op = static_cast<FileOp>(i);
        found = true;
      }
    }
    if (!found) return Status::InvalidArgument("unknown operation '" + op + "'");
  }
  const std::string& nth = parts[1];
  if (nth.empty() || nth.size() > 18 || !std::all_of(nth.begin(), nth.end(), [](char c) { return c >= '0' && c <= '9'; })) {
    return Status::InvalidArgument("NTH '" + nth + "' is not a count");
  }
  spec.nth = std::stoull(nth);
  const std::string& err = parts[2];
  spec.error = 0;
  for (const ErrnoName& e : kErrnoNames) {
    if (err == e.name) spec.error = e.value;
  }
  if (spec.error == 0 && !err.empty() && err.size() <= 4 &&
      std::all_of(err.begin(), err.end(), [](char c) { return c >= '0' && c <= '9'; })) {
    spec.error = std::stoi(err);
  }
  if (spec.error <= 0) return Status::InvalidArgument("unknown errno '" + err + "'");
  if (parts.size() == 4) spec.path_contains = parts[3];
  return spec;
}

FaultInjectingFileSystem::FaultInjectingFileSystem(FileSystem* base) : base_(base) {}

void FaultInjectingFileSystem::SetFault(const FaultSpec& spec) {
  std::lock_guard<std::mutex> lock(mu_);
  spec_ = spec;
  armed_ = true;
  matching_ = 0;
}

void FaultInjectingFileSystem::ClearFault() {
  std::lock_guard<std::mutex> lock(mu_);
  armed_ = false;
}

void FaultInjectingFileSystem::ResetCounts() {
  std::lock_guard<std::mutex> lock(mu_);
  matching_ = 0;
  injected_ = 0;
  std::fill(std::begin(per_op_), std::end(per_op_), 0);
  log_.clear();
}

uint64_t FaultInjectingFileSystem::calls() const {
  std::lock_guard<std::mutex> lock(mu_);
  return log_.size();
}

uint64_t FaultInjectingFileSystem::calls(FileOp op) const {
  std::lock_guard<std::mutex> lock(mu_);
  return per_op_[static_cast<int>(op)];
}

uint64_t FaultInjectingFileSystem::injected() const {
  std::lock_guard<std::mutex> lock(mu_);
  return injected_;
}

std::vector<std::string> FaultInjectingFileSystem::log() const {
  std::lock_guard<std::mutex> lock(mu_);
  return log_;
}

FileOp FaultInjectingFileSystem::injected_op() const {
  std::lock_guard<std::mutex> lock(mu_);
  return injected_op_;
}

std::string FaultInjectingFileSystem::injected_path() const {
  std::lock_guard<std::mutex> lock(mu_);
  return injected_path_;
}

int FaultInjectingFileSystem::Intercept(FileOp op, const std::string& path, bool* short_write) {
  std::lock_guard<std::mutex> lock(mu_);
  ++per_op_[static_cast<int>(op)];
  log_.push_back(std::string(FileOpName(op)) + " " + path);
  *short_write = false;
  if (!armed_) return 0;
  if (!spec_.any_op && spec_.op != op) return 0;
  if (!spec_.path_contains.empty() && path.find(spec_.path_contains) == std::string::npos) return 0;
  ++matching_;
  if (spec_.nth != 0 && matching_ != spec_.nth) return 0;
  ++injected_;
  injected_op_ = op;
  injected_path_ = path;
  *short_write = spec_.short_write && (op == FileOp::kAppend || op == FileOp::kWriteAt);
  return spec_.error;
}

StatusOr<std::unique_ptr<WritableFile>> FaultInjectingFileSystem::NewWritableFile(const std::string& path,
                                                                                  bool truncate) {
  bool unused = false;
  if (int err = Intercept(FileOp::kOpenWrite, path, &unused)) return Status::FromErrno("open for writing", path, err);
  DGRR_ASSIGN_OR_RETURN(auto file, base_->NewWritableFile(path, truncate));
  return std::unique_ptr<WritableFile>(new FaultyWritableFile(this, std::move(file)));
}

StatusOr<std::unique_ptr<RandomAccessFile>> FaultInjectingFileSystem::NewRandomAccessFile(
    const std::string& path) {
  bool unused = false;
  if (int err = Intercept(FileOp::kOpenRead, path, &unused)) return Status::FromErrno("open for reading", path, err);
  DGRR_ASSIGN_OR_RETURN(auto file, base_->NewRandomAccessFile(path));
  return std::unique_ptr<RandomAccessFile>(new FaultyRandomAccessFile(this, std::move(file)));
}

StatusOr<std::string> FaultInjectingFileSystem::ReadFile(const std::string& path, uint64_t max_bytes) {
  bool unused = false;
  if (int err = Intercept(FileOp::kOpenRead, path, &unused)) return Status::FromErrno("open for reading", path, err);
  if (int err = Intercept(FileOp::kRead, path, &unused)) return Status::FromErrno("read", path, err);
  return base_->ReadFile(path, max_bytes);
}

Status FaultInjectingFileSystem::WriteAt(const std::string& path, uint64_t offset, std::string_view data) {
  bool short_write = false;
  if (int err = Intercept(FileOp::kWriteAt, path, &short_write)) {
    if (short_write && data.size() > 1) DGRR_RETURN_IF_ERROR(base_->WriteAt(path, offset, data.substr(0, data.size() / 2)));
    return Status::FromErrno("write", path, err);
  }
  return base_->WriteAt(path, offset, data);
}

Status FaultInjectingFileSystem::SyncFile(const std::string& path) {
  bool unused = false;
  if (int err = Intercept(FileOp::kSync, path, &unused)) return Status::FromErrno("fsync", path, err);
  return base_->SyncFile(path);
}

Status FaultInjectingFileSystem::Rename(const std::string& from, const std::string& to) {
  bool unused = false;
  if (int err = Intercept(FileOp::kRename, to, &unused)) return Status::FromErrno("rename into place", to, err);
  return base_->Rename(from, to);
}

Status FaultInjectingFileSystem::Remove(const std::string& path) {
  bool unused = false;
  if (int err = Intercept(FileOp::kRemove, path, &unused)) return Status::FromErrno("remove", path, err);
  return base_->Remove(path);
}

Status FaultInjectingFileSystem::Truncate(const std::string& path, uint64_t size) {
  bool unused = false;
  if (int err = Intercept(FileOp::kTruncate, path, &unused)) return Status::FromErrno("truncate", path, err);
  return base_->Truncate(path, size);
}

Status FaultInjectingFileSystem::SyncDirectory(const std::string& dir) {
  bool unused = false;
  if (int err = Intercept(FileOp::kSyncDirectory, dir, &unused)) return Status::FromErrno("fsync directory", dir, err);
  return base_->SyncDirectory(dir);
}

StatusOr<std::vector<std::string>> FaultInjectingFileSystem::ListDirectory(const std::string& dir) {
  bool unused = false;
  if (int err = Intercept(FileOp::kListDirectory, dir, &unused)) return Status::FromErrno("list", dir, err);
  return base_->ListDirectory(dir);
}

Status FaultInjectingFileSystem::CreateDirectories(const std::string& dir) {
  bool unused = false;
  if (int err = Intercept(FileOp::kCreateDirectory, dir, &unused)) {
    return Status::FromErrno("create directory", dir, err);
  }
  return base_->CreateDirectories(dir);
}

StatusOr<uint64_t> FaultInjectingFileSystem::FileSize(const std::string& path) {
  bool unused = false;
  if (int err = Intercept(FileOp::kSize, path, &unused)) return Status::FromErrno("stat", path, err);
  return base_->FileSize(path);
}

std::unique_ptr<RandomAccessFile> NewMemoryFile(std::string path, std::string bytes) {
  return std::make_unique<MemoryFile>(std::move(path), std::move(bytes));
}

}  // namespace dgrr
