// FileSystem: the one interface through which dgrr touches files, in the
// manner of LevelDB's Env, so that tests can make any call fail.
//
// Every operation is one virtual call on a FileSystem: opening a file to
// append to, appending, syncing, closing, opening a file to read, reading,
// writing at an offset, renaming, removing, truncating, syncing and listing a
// directory, creating directories, asking a size. The default is POSIX
// (FileSystem::Default()); the free functions of base/file.h are thin
// wrappers over it. FaultInjectingFileSystem wraps another FileSystem and
// fails the Nth call (or every call) that matches an operation and a path
// fragment with a chosen errno, or turns an append into a short write.
//
// Reading is bounded: a file is opened with O_NONBLOCK (so a FIFO never
// blocks the open) and refused unless fstat says it is a regular file, and
// ReadFile refuses a file larger than the caller's cap before reading it.
// Both refusals are Corruption ("not a regular file", "larger than the
// N-byte limit"): the named file is not what the caller can use.
//
// Errors are IOError (NotFound for ENOENT) with one line:
// "PATH: OPERATION: strerror(errno)", e.g.
// "run/ckpt/step-00000004.h5.tmp.12.0: fsync: No space left on device".
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"

namespace dgrr {

class WritableFile;  // base/file.h

// A file opened for reading at any offset. Not thread-safe.
class RandomAccessFile {
 public:
  virtual ~RandomAccessFile() = default;
  // Reads up to `n` bytes at `offset` into `dst`; fewer only at end of file.
  virtual StatusOr<size_t> Read(uint64_t offset, size_t n, void* dst) = 0;
  // The file's current size (it may grow while a writer appends).
  virtual StatusOr<uint64_t> Size() = 0;
  virtual const std::string& path() const = 0;
  // The size fstat gave when the file was opened, known without a call of
  // its own (nothing counted, nothing to fail); 0 when not known, and for a
  // file in memory (NewMemoryFile), whose reads are copies that gain nothing
  // from being done ahead. TraceReader decides from it whether to read ahead.
  virtual uint64_t size_at_open() const { return 0; }
  // Whether Read may be called from two threads at once, each call on its
  // own (a pread of one descriptor): TraceReader then has its read-ahead
  // thread read some pieces while it reads others itself. False where the
  // calls must come one at a time, in one order (a FaultInjectingFileSystem
  // counts them).
  virtual bool reads_may_overlap() const { return false; }
};

// The operations a FileSystem counts and a fault can target.
enum class FileOp : uint8_t {
  kOpenWrite,        // NewWritableFile
  kAppend,           // WritableFile::Append
  kSync,             // WritableFile::Sync, SyncFile
  kClose,            // WritableFile::Close
  kOpenRead,         // NewRandomAccessFile, ReadFile's open
  kRead,             // RandomAccessFile::Read, ReadFile's read
  kWriteAt,          // WriteAt
  kRename,           // Rename
  kRemove,           // Remove
  kTruncate,         // Truncate
  kSyncDirectory,    // SyncDirectory
  kListDirectory,    // ListDirectory
  kCreateDirectory,  // CreateDirectories
  kSize,             // FileSize
};
constexpr int kFileOpCount = 14;
// "open-write", "append", "sync", "close", "open-read", "read", "write-at",
// "rename", "remove", "truncate", "sync-dir", "list", "mkdir", "size".
const char* FileOpName(FileOp op);

class FileSystem {
 public:
  virtual ~FileSystem() = default;

  // The file system every dgrr component uses: POSIX, unless a test has
  // installed another (ScopedFileSystemOverride) or the test hook
  // DGRR_TEST_FAULT was set when the process first asked (see
  // FaultSpec::Parse). Never null.
  static FileSystem* Default();
  // The POSIX file system itself, whatever Default() returns.
  static FileSystem* Posix();

  // Opens `path` for appending (O_APPEND|O_CREAT, mode 0644); `truncate`
  // empties an existing file first. Appends are unbuffered write(2)s.
  virtual StatusOr<std::unique_ptr<WritableFile>> NewWritableFile(const std::string& path,
                                                                  bool truncate) = 0;
  // Opens an existing regular file for reading (see the header comment).
  virtual StatusOr<std::unique_ptr<RandomAccessFile>> NewRandomAccessFile(
      const std::string& path) = 0;
  // The whole of a regular file of at most `max_bytes` bytes.
  virtual StatusOr<std::string> ReadFile(const std::string& path, uint64_t max_bytes) = 0;
  // Overwrites bytes at `offset` of an existing file (no create, no sync).
  virtual Status WriteAt(const std::string& path, uint64_t offset, std::string_view data) = 0;
  // fsync of a file that is not open (opened afresh to sync it).
  virtual Status SyncFile(const std::string& path) = 0;
  virtual Status Rename(const std::string& from, const std::string& to) = 0;
  // Removes a file; a missing file is OK.
  virtual Status Remove(const std::string& path) = 0;
  // Cuts `path` to `size` bytes and fsyncs it.
  virtual Status Truncate(const std::string& path, uint64_t size) = 0;
  // fsync of a directory, so a rename or create within it is durable.
  virtual Status SyncDirectory(const std::string& dir) = 0;
  // The names in `dir` (no "." or ".."), unsorted. NotFound if it is missing.
  virtual StatusOr<std::vector<std::string>> ListDirectory(const std::string& dir) = 0;
  // Creates `dir` and its missing parents.
  virtual Status CreateDirectories(const std::string& dir) = 0;
  virtual StatusOr<uint64_t> FileSize(const std::string& path) = 0;
};

// Installs `fs` as FileSystem::Default() for this object's lifetime (tests
// only; install before starting threads that do I/O, and do not nest
// overrides across threads).
class ScopedFileSystemOverride {
 public:
  explicit ScopedFileSystemOverride(FileSystem* fs);
  ~ScopedFileSystemOverride();
  ScopedFileSystemOverride(const ScopedFileSystemOverride&) = delete;
  ScopedFileSystemOverride& operator=(const ScopedFileSystemOverride&) = delete;

 private:
  FileSystem* previous_;
};

// Which calls a FaultInjectingFileSystem fails, and how.
struct FaultSpec {
  bool any_op = true;          // every operation counts; otherwise only `op`
  FileOp op = FileOp::kAppend;
  std::string path_contains;   // only calls on paths containing this; empty: all
  uint64_t nth = 1;            // fail the nth matching call (1-based); 0: every one
  int error = EIO;             // the errno the failed call reports
  // Append and WriteAt: write the first half of the bytes, then fail (what a
  // disk that fills up mid-write does).
  bool short_write = false;

  // The test hook's syntax: "OP[+short]:NTH:ERRNO[:PATH_FRAGMENT]", with OP a
  // FileOpName or "any", NTH a number (0 = every matching call) and ERRNO a
  // name (ENOSPC, EIO, EDQUOT, EROFS, EFBIG, EACCES, ENOENT) or a number.
  // Example: DGRR_TEST_FAULT="rename:1:ENOSPC:/ckpt/".
  static StatusOr<FaultSpec> Parse(std::string_view text);
};

// Wraps `base` (not owned; it must outlive this object), counts every call,
// and fails the calls a FaultSpec selects. Thread-safe: the trace writer's
// I/O thread and rank threads share it. Tests run an operation once without a
// fault to count its calls, then fail call 1..N in turn, so new call sites
// are covered without naming them.
class FaultInjectingFileSystem final : public FileSystem {
 public:
  explicit FaultInjectingFileSystem(FileSystem* base = FileSystem::Posix());

  void SetFault(const FaultSpec& spec);
  void ClearFault();
  // Forgets the calls counted so far (the fault's own count included).
  void ResetCounts();
  // Calls seen since the last ResetCounts, of every op / of `op`.
  uint64_t calls() const;
  uint64_t calls(FileOp op) const;
  // How many calls have been failed since the last ResetCounts.
  uint64_t injected() const;
  // "op path" of every call since the last ResetCounts, in order.
  std::vector<std::string> log() const;
  // The operation and path of the last call failed on purpose.
  FileOp injected_op() const;
  std::string injected_path() const;

  // Decides whether this call fails: returns the errno to report, 0 if not.
  // (Public for the wrapped files; not for callers.)
  int Intercept(FileOp op, const std::string& path, bool* short_write);

  StatusOr<std::unique_ptr<WritableFile>> NewWritableFile(const std::string& path,
                                                          bool truncate) override;
  StatusOr<std::unique_ptr<RandomAccessFile>> NewRandomAccessFile(const std::string& path) override;
  StatusOr<std::string> ReadFile(const std::string& path, uint64_t max_bytes) override;
  Status WriteAt(const std::string& path, uint64_t offset, std::string_view data) override;
  Status SyncFile(const std::string& path) override;
  Status Rename(const std::string& from, const std::string& to) override;
  Status Remove(const std::string& path) override;
  Status Truncate(const std::string& path, uint64_t size) override;
  Status SyncDirectory(const std::string& dir) override;
  StatusOr<std::vector<std::string>> ListDirectory(const std::string& dir) override;
  Status CreateDirectories(const std::string& dir) override;
  StatusOr<uint64_t> FileSize(const std::string& path) override;

 private:
  FileSystem* const base_;
  mutable std::mutex mu_;
  bool armed_ = false;
  FaultSpec spec_;
  uint64_t matching_ = 0;
  uint64_t injected_ = 0;
  FileOp injected_op_ = FileOp::kAppend;
  std::string injected_path_;
  uint64_t per_op_[kFileOpCount] = {};
  std::vector<std::string> log_;
};

// A read-only file held in memory, for readers fed bytes that never touched a
// disk (the fuzz targets). `path` only names it in messages.
std::unique_ptr<RandomAccessFile> NewMemoryFile(std::string path, std::string bytes);

}  // namespace dgrr
