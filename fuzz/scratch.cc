#include "fuzz/scratch.h"

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <system_error>

namespace dgrr::fuzz {
namespace {

std::string PickBase() {
  if (access("/dev/shm", W_OK) == 0) return "/dev/shm";
  const char* tmp = std::getenv("TMPDIR");
  return tmp && *tmp ? tmp : "/tmp";
}

// A process that crashed or was killed (a finding, a fork-mode job) never ran
// RemoveScratch: remove the directories of fuzzers no longer alive.
void RemoveStaleScratch(const std::string& base) {
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(base, ec)) {
    const std::string name = e.path().filename().string();
    if (name.rfind("dgrr-fuzz.", 0) != 0) continue;
    const long pid = std::strtol(name.c_str() + 10, nullptr, 10);
    if (pid > 0 && kill(static_cast<pid_t>(pid), 0) != 0 && errno == ESRCH) {
      std::filesystem::remove_all(e.path(), ec);
    }
  }
}

void RemoveScratch() {
  std::error_code ignored;
  std::filesystem::remove_all(ScratchDir(), ignored);
}

[[noreturn]] void Die(const std::string& what) {
  std::perror(what.c_str());
  std::abort();
}

}  // namespace

const std::string& ScratchDir() {
  // Never destroyed: RemoveScratch runs at exit, after static destructors
  // registered later than it would have freed the name.
  static const std::string& dir = *new std::string([] {
    const std::string base = PickBase();
    RemoveStaleScratch(base);
    std::string d = base + "/dgrr-fuzz." + std::to_string(getpid());
    std::error_code ec;
    std::filesystem::create_directories(d, ec);
    if (ec) Die("dgrr fuzz: cannot create " + d);
    std::atexit(RemoveScratch);
    return d;
  }());
  return dir;
}

std::string WriteScratchFile(const std::string& name, std::string_view bytes) {
  const std::string path = ScratchDir() + "/" + name;
  const int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) Die("dgrr fuzz: open " + path);
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = write(fd, bytes.data() + done, bytes.size() - done);
    if (n <= 0) Die("dgrr fuzz: write " + path);
    done += static_cast<size_t>(n);
  }
  close(fd);
  return path;
}

}  // namespace dgrr::fuzz
