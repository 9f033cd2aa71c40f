#include "base/status.h"

#include <cstring>

namespace dgrr {

const char* StatusCodeName(StatusCode code) {
  switch (code) {
    case StatusCode::kOk: return "OK";
    case StatusCode::kInvalidArgument: return "Invalid argument";
    case StatusCode::kNotFound: return "Not found";
    case StatusCode::kIOError: return "I/O error";
    case StatusCode::kCorruption: return "Corruption";
    case StatusCode::kDivergence: return "Divergence";
    case StatusCode::kIntegrityFailure: return "Replay integrity failure";
    case StatusCode::kFailedPrecondition: return "Failed precondition";
    case StatusCode::kInternal: return "Internal error";
  }
  return "Unknown";
}

Status Status::FromErrno(std::string_view op, std::string_view path, int err) {
  std::string msg;
  msg.append(path).append(": ").append(op).append(": ").append(std::strerror(err));
  if (err == ENOENT) return NotFound(msg);
  return IOError(msg);
}

std::string Status::ToString() const {
  if (ok()) return "OK";
  std::string s = StatusCodeName(code_);
  s.append(": ").append(message_);
  return s;
}

Status Status::WithPrefix(std::string_view prefix) const {
  if (ok()) return *this;
  std::string msg(prefix);
  msg.append(": ").append(message_);
  return Status(code_, msg);
}

int ExitCodeFor(const Status& status) {
  switch (status.code()) {
    case StatusCode::kOk: return kExitOk;
    case StatusCode::kInvalidArgument: return kExitUsage;
    case StatusCode::kFailedPrecondition: return kExitUsage;
    case StatusCode::kNotFound: return kExitIO;
    case StatusCode::kIOError: return kExitIO;
    case StatusCode::kCorruption: return kExitInvalidData;
    case StatusCode::kDivergence: return kExitDivergence;
    case StatusCode::kIntegrityFailure: return kExitReplayIntegrity;
    case StatusCode::kInternal: return kExitIO;
  }
  return kExitIO;
}

}  // namespace dgrr
