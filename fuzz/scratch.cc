#include "fuzz/scratch.h"

#include <fcntl.h>
#include <unistd.h>

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
    std::string d = PickBase() + "/dgrr-fuzz." + std::to_string(getpid());
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
