#include "replay/trust.h"

#include <grp.h>
#include <pwd.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <sstream>

#include "base/environment.h"
#include "base/file.h"
#include "runtime/launch_record.h"

namespace dgrr::replay {
namespace {

std::string Octal(mode_t mode) {
  char text[8];
  std::snprintf(text, sizeof text, "%04o", static_cast<unsigned>(mode & 07777));
  return text;
}

// The real path of `path`: symbolic links resolved; for a path that does not
// exist (a listed one), as far as it does.
std::string RealPath(const std::string& path) {
  std::error_code ec;
  std::filesystem::path p = std::filesystem::weakly_canonical(path, ec);
  if (ec) p = std::filesystem::absolute(path, ec).lexically_normal();
  std::string s = p.string();
  while (s.size() > 1 && s.back() == '/') s.pop_back();
  return s;
}

// Whether `path` is `dir` or below it (both real paths).
bool IsAtOrBelow(const std::string& path, const std::string& dir) {
  if (dir == "/") return true;
  return path == dir || (path.size() > dir.size() && path.compare(0, dir.size(), dir) == 0 && path[dir.size()] == '/');
}

// Whether `gid` is the effective user's private group (the convention
// behind umask 002: a group of the user's own name, with no other member),
// whose write permission lets no one else in.
bool IsPrivateGroup(gid_t gid) {
  const struct passwd* pw = ::getpwuid(::geteuid());
  if (pw == nullptr || pw->pw_gid != gid) return false;
  const std::string user = pw->pw_name;
  const struct group* gr = ::getgrgid(gid);
  if (gr == nullptr || user != gr->gr_name) return false;
  for (char** member = gr->gr_mem; member != nullptr && *member != nullptr; ++member) {
    if (user != *member) return false;
  }
  return true;
}

// Why `path` (stat'ed, following links) is not safe to take from, or "".
StatusOr<std::string> Unsafe(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return Status::FromErrno("stat", path, errno);
  const uid_t me = ::geteuid();
  if (st.st_uid != me) {
    return "is owned by uid " + std::to_string(st.st_uid) + ", not by you (uid " + std::to_string(me) + ")";
  }
  if ((st.st_mode & S_IWOTH) != 0 || ((st.st_mode & S_IWGRP) != 0 && !IsPrivateGroup(st.st_gid))) {
    return std::string("is writable by ") + ((st.st_mode & S_IWOTH) ? "others" : "its group") + " (mode " +
           Octal(st.st_mode) + ")";
  }
  return std::string();
}

// Whether the trusted list names `real` (a real path); the list's path when it does.
StatusOr<bool> Listed(const std::string& list, const std::string& real) {
  if (list.empty() || !PathExists(list)) return false;
  DGRR_ASSIGN_OR_RETURN(std::string unsafe, Unsafe(list));
  if (!unsafe.empty()) {
    return Status::IOError(list + " (the trusted runs) " + unsafe + ": it is not used; make it yours and "
                           "writable only by you (chmod go-w)");
  }
  DGRR_ASSIGN_OR_RETURN(std::string text, ReadFileToString(list, 1 << 20));
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    while (!line.empty() && (line.back() == '\r' || line.back() == ' ' || line.back() == '\t')) line.pop_back();
    const size_t begin = line.find_first_not_of(" \t");
    if (begin == std::string::npos) continue;
    line.erase(0, begin);
    if (line[0] == '#') continue;
    if (line == "*") return true;
    if (line[0] != '/') continue;  // absolute paths only
    if (IsAtOrBelow(real, RealPath(line))) return true;
  }
  return false;
}

std::string HowToTrust(const std::string& real) {
  const std::string list = TrustedListPath();
  return "pass --trust if you trust whoever can write it" +
         (list.empty() ? std::string() : ", or add " + real + " to " + list) +
         " (docs/launch-record.md, Security)";
}

}  // namespace

std::string TrustedListPath() {
  const std::string xdg = GetEnvOrEmpty("XDG_CONFIG_HOME");
  if (!xdg.empty() && xdg[0] == '/') return xdg + "/dgrr/trusted";
  const std::string home = GetEnvOrEmpty("HOME");
  if (!home.empty()) return home + "/.config/dgrr/trusted";
  return "";
}

StatusOr<TrustDecision> CheckRunTrust(const std::string& run_dir, bool trust_flag) {
  if (trust_flag) return TrustDecision{RunTrust::kExplicit, "--trust"};
  const std::string real = RealPath(run_dir);
  const std::string list = TrustedListPath();
  DGRR_ASSIGN_OR_RETURN(const bool listed, Listed(list, real));
  if (listed) return TrustDecision{RunTrust::kExplicit, "listed in " + list};
  DGRR_ASSIGN_OR_RETURN(std::string dir_unsafe, Unsafe(real));
  if (!dir_unsafe.empty()) {
    return Status::FailedPrecondition(run_dir + ": not starting its recorded program: the run directory " +
                                      (real == run_dir ? std::string() : "(" + real + ") ") + dir_unsafe + "; " +
                                      HowToTrust(real));
  }
  const std::string launch = LaunchPathFor(real);
  struct stat st {};
  if (::lstat(launch.c_str(), &st) == 0) {
    DGRR_ASSIGN_OR_RETURN(std::string launch_unsafe, Unsafe(launch));
    if (!launch_unsafe.empty()) {
      const std::string target = RealPath(launch);
      return Status::FailedPrecondition(run_dir + ": not starting its recorded program: " +
                                        LaunchPathFor(run_dir) +
                                        (target == launch ? std::string() : " (" + target + ")") + " " +
                                        launch_unsafe + "; " + HowToTrust(real));
    }
  }
  return TrustDecision{RunTrust::kOwned, "owned by you"};
}

}  // namespace dgrr::replay
