#include "base/kill_point.h"

#include <signal.h>
#include <stdlib.h>

#include <atomic>
#include <string>

#include "base/environment.h"

namespace dgrr {
namespace {

struct KillSpec {
  bool set = false;
  std::string stage;
  int64_t n = -1;
  int rank = -1;  // -1: any
  int signal = SIGKILL;
};

// Parsed once; a malformed value disarms the hook rather than guess.
KillSpec ParseSpec() {
  KillSpec spec;
  const std::string text = GetEnvOrEmpty("DGRR_TEST_KILL_AT");
  if (text.empty()) return spec;
  const size_t a = text.find(':');
  if (a == std::string::npos || a == 0) return spec;
  const size_t b = text.find(':', a + 1);
  try {
    spec.stage = text.substr(0, a);
    spec.n = std::stoll(text.substr(a + 1, b == std::string::npos ? std::string::npos : b - a - 1));
    if (b != std::string::npos) spec.rank = std::stoi(text.substr(b + 1));
  } catch (const std::exception&) {
    return KillSpec{};
  }
  if (const std::string name = GetEnvOrEmpty("DGRR_TEST_KILL_SIGNAL"); !name.empty()) {
    if (name == "INT") {
      spec.signal = SIGINT;
    } else if (name == "TERM") {
      spec.signal = SIGTERM;
    } else {
      return KillSpec{};
    }
  }
  spec.set = true;
  return spec;
}

}  // namespace

void KillPoint(std::string_view stage, int64_t n, int rank) {
  static const KillSpec spec = ParseSpec();
  if (!spec.set || stage != spec.stage || n != spec.n) return;
  if (spec.rank >= 0 && rank != spec.rank) return;
  if (spec.signal == SIGKILL) ::raise(SIGKILL);
  // A catchable signal is delivered once: a second Ctrl-C means "now".
  static std::atomic<bool> raised{false};
  if (!raised.exchange(true)) ::raise(spec.signal);
}

}  // namespace dgrr
