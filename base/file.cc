#include "base/file.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <filesystem>

namespace dgrr {

StatusOr<std::unique_ptr<WritableFile>> OpenWritableFile(const std::string& path, bool truncate) {
  return FileSystem::Default()->NewWritableFile(path, truncate);
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

Status SyncDirectory(const std::string& dir) { return FileSystem::Default()->SyncDirectory(dir); }

Status CommitFileAtomically(const std::string& path,
                            const std::function<Status(const std::string& tmp_path)>& fill) {
  FileSystem* fs = FileSystem::Default();
  const std::string tmp = TemporaryPathFor(path);
  Status s = fill(tmp);
  // fill() may have closed its handle; fsync through a fresh descriptor.
  if (s.ok()) s = fs->SyncFile(tmp);
  if (s.ok()) s = fs->Rename(tmp, path);
  if (!s.ok()) {
    // Best effort: the first error is the one worth reporting, and a
    // leftover temporary is ignored by every reader and removed by the next
    // writer's RemoveStaleTemporaries.
    (void)fs->Remove(tmp);
    return s;
  }
  return fs->SyncDirectory(DirName(path));
}

Status WriteFileAtomically(const std::string& path, std::string_view data) {
  return CommitFileAtomically(path, [&](const std::string& tmp) -> Status {
    DGRR_ASSIGN_OR_RETURN(auto file, OpenWritableFile(tmp, /*truncate=*/true));
    DGRR_RETURN_IF_ERROR(file->Append(data.data(), data.size()));
    return file->Close();
  });
}

StatusOr<std::string> ReadFileToString(const std::string& path, uint64_t max_bytes) {
  return FileSystem::Default()->ReadFile(path, max_bytes);
}

StatusOr<std::string> ReadFileToString(const std::string& path) {
  return ReadFileToString(path, kDefaultReadCapBytes);
}

StatusOr<std::unique_ptr<RandomAccessFile>> OpenRandomAccessFile(const std::string& path) {
  return FileSystem::Default()->NewRandomAccessFile(path);
}

StatusOr<uint64_t> FileSize(const std::string& path) { return FileSystem::Default()->FileSize(path); }

Status RenameFile(const std::string& from, const std::string& to) {
  return FileSystem::Default()->Rename(from, to);
}

Status RemoveFile(const std::string& path) { return FileSystem::Default()->Remove(path); }

StatusOr<std::vector<std::string>> ListDirectory(const std::string& dir) {
  DGRR_ASSIGN_OR_RETURN(std::vector<std::string> names, FileSystem::Default()->ListDirectory(dir));
  std::sort(names.begin(), names.end());
  return names;
}

bool PathExists(const std::string& path) {
  std::error_code ec;
  return std::filesystem::exists(path, ec);
}

bool IsDirectory(const std::string& path) {
  std::error_code ec;
  return std::filesystem::is_directory(path, ec);
}

Status CreateDirectories(const std::string& dir) { return FileSystem::Default()->CreateDirectories(dir); }

Status TruncateFile(const std::string& path, uint64_t size) {
  return FileSystem::Default()->Truncate(path, size);
}

}  // namespace dgrr
