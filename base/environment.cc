#include "base/environment.h"

#include <stdlib.h>

namespace dgrr {

std::unique_lock<std::recursive_mutex> LockEnvironment() {
  static std::recursive_mutex mutex;
  return std::unique_lock<std::recursive_mutex>(mutex);
}

std::optional<std::string> GetEnv(const char* name) {
  auto lock = LockEnvironment();
  const char* value = ::getenv(name);
  if (value == nullptr) return std::nullopt;
  return std::string(value);
}

std::string GetEnvOrEmpty(const char* name) { return GetEnv(name).value_or(""); }

void SetEnvIfUnset(const std::string& name, const std::string& value) {
  auto lock = LockEnvironment();
  ::setenv(name.c_str(), value.c_str(), /*overwrite=*/0);
}

}  // namespace dgrr
