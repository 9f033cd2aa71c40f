#include "base/file.h"

#include <signal.h>

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
  RemoveScratchOfDeadProcesses(base, prefix);
  // The creator's pid in the name lets a later command tell a scratch
  // directory that a killed command left behind from one still in use.
  std::string name = base + "/" + prefix + "-" + std::to_string(::getpid()) + "-XXXXXX";
  if (::mkdtemp(name.data()) == nullptr) return Status::FromErrno("create scratch directory", base, errno);
  return ScratchDirectory(std::move(name));
}

void ScratchDirectory::RemoveScratchOfDeadProcesses(const std::string& base, const std::string& prefix) {
  auto names = ListDirectory(base);
  if (!names.ok()) return;  // best effort: a leftover costs disk, not correctness
  const std::string lead = prefix + "-";
  for (const std::string& name : *names) {
    if (name.compare(0, lead.size(), lead) != 0) continue;
    const size_t dash = name.find('-', lead.size());
    if (dash == std::string::npos || dash == lead.size()) continue;
    const std::string pid_text = name.substr(lead.size(), dash - lead.size());
    if (pid_text.find_first_not_of("0123456789") != std::string::npos || pid_text.size() > 9) continue;
    const pid_t pid = static_cast<pid_t>(std::stol(pid_text));
    // Only a process that no longer exists; a live one (or one of another
    // user's, EPERM) keeps its directory.
    if (pid <= 0 || ::kill(pid, 0) == 0 || errno != ESRCH) continue;
    std::error_code ec;
    std::filesystem::remove_all(base + "/" + name, ec);
  }
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

Status WriteFileAtomicallyIfChanged(const std::string& path, std::string_view data) {
  StatusOr<std::string> old = FileSystem::Default()->ReadFile(path, data.size() + 1);
  if (old.ok() && *old == data) return FileSystem::Default()->SyncDirectory(DirName(path));
  return WriteFileAtomically(path, data);
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
