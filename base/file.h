// File I/O behind small interfaces, so tests can inject faults and so every
// durable write in dgrr follows one discipline: write, fsync, rename, fsync dir.
//
// Every function here is a thin wrapper over FileSystem::Default()
// (base/file_system.h), so a test that installs a FaultInjectingFileSystem
// reaches every call site in dgrr that uses them.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "base/file_system.h"
#include "base/status.h"

namespace dgrr {

// An append-only file. Not thread-safe; one owner at a time.
class WritableFile {
 public:
  virtual ~WritableFile() = default;
  virtual Status Append(const void* data, size_t n) = 0;
  virtual Status Flush() = 0;  // hand buffered bytes to the OS
  virtual Status Sync() = 0;   // Flush, then make them durable (fsync)
  virtual Status Close() = 0;  // Flush and close; further calls fail
  virtual const std::string& path() const = 0;
};

// Opens `path` for appending (O_APPEND|O_CREAT). With `truncate`, an existing
// file is emptied first. The returned file buffers nothing: every Append is a
// write(2), so callers batch.
StatusOr<std::unique_ptr<WritableFile>> OpenWritableFile(const std::string& path, bool truncate);

// Writes `data` to `path` atomically: a temporary file in the same directory is
// written, fsync'd and renamed over `path`, then the directory is fsync'd. A
// crash at any moment leaves either the old file or the new one, never a mix.
Status WriteFileAtomically(const std::string& path, std::string_view data);

// WriteFileAtomically, unless `path` already holds exactly `data`: then only
// the directory is fsync'd (every writer here renames a file in only after
// fsyncing it, so that makes the file as durable as a fresh write would).
// A resumed session rewrites its run files with what they mostly already say.
Status WriteFileAtomicallyIfChanged(const std::string& path, std::string_view data);

// Same, with the content produced by `fill` into an open temporary file.
// `fill` receives the temporary path; on failure the temporary is removed.
Status CommitFileAtomically(const std::string& path,
                            const std::function<Status(const std::string& tmp_path)>& fill);

// fsync of a directory, so a rename or create within it is durable.
Status SyncDirectory(const std::string& dir);

// Size caps for reading a file whole (docs/files.md). A file over its cap,
// or not a regular file (a directory, FIFO, device), is refused with
// Corruption before any byte is read, so an endless file cannot exhaust
// memory and a FIFO cannot hang the reader.
constexpr uint64_t kMaxJsonFileBytes = uint64_t{64} << 20;     // config.json, env.json, plans
constexpr uint64_t kMaxCorpusFileBytes = uint64_t{1} << 30;    // --data FILE
constexpr uint64_t kDefaultReadCapBytes = kMaxJsonFileBytes;

// The whole of a regular file of at most `max_bytes` bytes.
StatusOr<std::string> ReadFileToString(const std::string& path, uint64_t max_bytes);
// Same, with kDefaultReadCapBytes.
StatusOr<std::string> ReadFileToString(const std::string& path);
// Opens an existing regular file for reading at any offset.
StatusOr<std::unique_ptr<RandomAccessFile>> OpenRandomAccessFile(const std::string& path);
StatusOr<uint64_t> FileSize(const std::string& path);
// For readers that need the descriptor itself (to fstat the very file they
// verified): opens `path` read-only with O_NONBLOCK, refusing anything but a
// regular file, as every read through the file layer does. The caller owns
// the descriptor. Not routed through FileSystem::Default().
StatusOr<int> OpenRegularFileDescriptor(const std::string& path);
// Renames `from` over `to` (no directory sync).
Status RenameFile(const std::string& from, const std::string& to);
// Removes a file; a missing file is OK.
Status RemoveFile(const std::string& path);
// Names in `dir` without "." and "..", sorted.
StatusOr<std::vector<std::string>> ListDirectory(const std::string& dir);
bool PathExists(const std::string& path);
bool IsDirectory(const std::string& path);
// Creates `dir` and its parents if missing.
Status CreateDirectories(const std::string& dir);
// Cuts `path` to `size` bytes and fsyncs it.
Status TruncateFile(const std::string& path, uint64_t size);
// The directory part of `path` ("." when it has none).
std::string DirName(const std::string& path);
// A path in the directory of `path` that no other writer uses.
std::string TemporaryPathFor(const std::string& path);
// A fresh directory (mkdtemp) that is removed, with everything in it, when
// this object goes out of scope: where replay, rollback and bisect
// re-execute a run.
class ScratchDirectory {
 public:
  // `parent`/`prefix`-PID-XXXXXX; an empty `parent` is the system's
  // temporary directory ($TMPDIR or /tmp). Directories of the same prefix
  // left there by processes that no longer exist are removed first.
  static StatusOr<ScratchDirectory> Create(const std::string& prefix, const std::string& parent = "");
  ScratchDirectory(ScratchDirectory&& other) noexcept : path_(std::move(other.path_)) { other.path_.clear(); }
  ScratchDirectory& operator=(ScratchDirectory&&) = delete;
  ~ScratchDirectory();
  const std::string& path() const { return path_; }

 private:
  explicit ScratchDirectory(std::string path) : path_(std::move(path)) {}
  // Removes `base`/`prefix`-PID-* directories whose process PID is gone: what
  // a replay, rollback or bisect killed before its destructor ran left behind.
  static void RemoveScratchOfDeadProcesses(const std::string& base, const std::string& prefix);
  std::string path_;
};

// Whether the file name `name` is one TemporaryPathFor made: what a writer
// killed before its rename leaves behind.
bool IsTemporaryName(const std::string& name);

}  // namespace dgrr
