// Status: the one error type of the dgrr library.
//
// A Status is OK or carries a code and a one-line message. Library code
// returns Status (or StatusOr<T>) instead of throwing; the CLI maps the code to
// a documented exit code (see ExitCodeFor). Modelled on LevelDB's Status: cheap
// on the happy path, built by named factories, tested by predicates.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

namespace dgrr {

enum class StatusCode : uint8_t {
  kOk = 0,
  kInvalidArgument,   // the caller asked for something malformed (usage error)
  kNotFound,          // a file or item that must exist does not
  kIOError,           // the operating system refused a read, write or sync
  kCorruption,        // a trace or checkpoint failed validation
  kDivergence,        // two runs were compared and differ
  kIntegrityFailure,  // a replay did not reproduce its recorded fingerprints
  kFailedPrecondition,// the state of the world forbids the operation (e.g. dir not empty)
  kInternal,          // a bug in dgrr
};

class [[nodiscard]] Status {
 public:
  Status() = default;  // OK

  static Status OK() { return Status(); }
  static Status InvalidArgument(std::string_view msg) { return {StatusCode::kInvalidArgument, msg}; }
  static Status NotFound(std::string_view msg) { return {StatusCode::kNotFound, msg}; }
  static Status IOError(std::string_view msg) { return {StatusCode::kIOError, msg}; }
  static Status Corruption(std::string_view msg) { return {StatusCode::kCorruption, msg}; }
  static Status Divergence(std::string_view msg) { return {StatusCode::kDivergence, msg}; }
  static Status IntegrityFailure(std::string_view msg) { return {StatusCode::kIntegrityFailure, msg}; }
  static Status FailedPrecondition(std::string_view msg) { return {StatusCode::kFailedPrecondition, msg}; }
  static Status Internal(std::string_view msg) { return {StatusCode::kInternal, msg}; }
  // An IOError built from errno, naming the operation and the path.
  static Status FromErrno(std::string_view op, std::string_view path, int err);

  bool ok() const { return code_ == StatusCode::kOk; }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }
  bool IsInvalidArgument() const { return code_ == StatusCode::kInvalidArgument; }
  bool IsNotFound() const { return code_ == StatusCode::kNotFound; }
  bool IsIOError() const { return code_ == StatusCode::kIOError; }
  bool IsCorruption() const { return code_ == StatusCode::kCorruption; }

  // "Corruption: trace.bin: record 12 at offset 832: CRC mismatch".
  std::string ToString() const;

  // Returns a copy whose message is "<prefix>: <message>" (same code).
  Status WithPrefix(std::string_view prefix) const;

 private:
  Status(StatusCode code, std::string_view msg) : code_(code), message_(msg) {}
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
};

const char* StatusCodeName(StatusCode code);

// The CLI's documented exit codes.
enum ExitCode : int {
  kExitOk = 0,
  kExitUsage = 1,
  kExitIO = 2,
  kExitInvalidData = 3,
  kExitDivergence = 4,
  kExitReplayIntegrity = 5,
};
int ExitCodeFor(const Status& status);

// StatusOr<T>: a value or the Status saying why there is none.
template <typename T>
class [[nodiscard]] StatusOr {
 public:
  StatusOr(T value) : value_(std::move(value)) {}                       // NOLINT
  StatusOr(Status status) : status_(std::move(status)) {                 // NOLINT
    if (status_.ok()) status_ = Status::Internal("StatusOr built from an OK status");
  }
  bool ok() const { return status_.ok(); }
  const Status& status() const { return status_; }
  T& value() & { return *value_; }
  const T& value() const& { return *value_; }
  T&& value() && { return std::move(*value_); }
  T* operator->() { return &*value_; }
  const T* operator->() const { return &*value_; }
  T& operator*() & { return *value_; }
  const T& operator*() const& { return *value_; }

 private:
  Status status_;
  std::optional<T> value_;
};

}  // namespace dgrr

#define DGRR_CONCAT_INNER(a, b) a##b
#define DGRR_CONCAT(a, b) DGRR_CONCAT_INNER(a, b)

// Returns early from the enclosing function when `expr` yields a non-OK Status.
#define DGRR_RETURN_IF_ERROR(expr)                 \
  do {                                             \
    ::dgrr::Status dgrr_status_ = (expr);          \
    if (!dgrr_status_.ok()) return dgrr_status_;   \
  } while (0)

// DGRR_ASSIGN_OR_RETURN(auto x, MakeX()): unwraps a StatusOr or returns its Status.
#define DGRR_ASSIGN_OR_RETURN(lhs, expr) \
  DGRR_ASSIGN_OR_RETURN_IMPL(DGRR_CONCAT(dgrr_statusor_, __LINE__), lhs, expr)
#define DGRR_ASSIGN_OR_RETURN_IMPL(tmp, lhs, expr) \
  auto tmp = (expr);                               \
  if (!tmp.ok()) return tmp.status();              \
  lhs = std::move(tmp).value()
