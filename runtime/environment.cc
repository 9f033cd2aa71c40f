#include "runtime/environment.h"

#include <sys/utsname.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <thread>

#include "base/version.h"
#include "fingerprint/fingerprint.h"

namespace dgrr {

std::string CpuModelName() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("model name", 0) == 0) {
      size_t colon = line.find(':');
      if (colon != std::string::npos) {
        size_t start = line.find_first_not_of(' ', colon + 1);
        return start == std::string::npos ? "" : line.substr(start);
      }
    }
  }
  return "unknown";
}

nlohmann::json CollectEnvironment(const DeterminismControls& controls) {
  using nlohmann::json;
  json env;
  env["schema"] = kEnvironmentSchema;
  env["dgrr"] = {{"version", DGRR_VERSION_STRING},
                 {"git_commit", DGRR_GIT_COMMIT},
                 {"build_type", DGRR_BUILD_TYPE},
                 {"cuda_build", DGRR_HAVE_CUDA_BUILD != 0}};
  env["compiler"] = {{"id", DGRR_COMPILER}, {"cxx_flags", DGRR_CXX_FLAGS}};

  struct utsname uts {};
  ::uname(&uts);
  env["host"] = {{"cpu_model", CpuModelName()},
                 {"hardware_threads", std::thread::hardware_concurrency()},
                 {"os", std::string(uts.sysname) + " " + uts.release},
                 {"machine", uts.machine},
                 {"hostname", uts.nodename}};

  GpuInfo gpu = QueryGpuInfo();
  json g = {{"available", gpu.available}};
  if (gpu.available) {
    g["device_count"] = gpu.device_count;
    g["name"] = gpu.name;
    g["sm_count"] = gpu.sm_count;
    g["compute_capability"] = gpu.compute_capability;
    g["cuda_runtime_version"] = gpu.cuda_runtime_version;
    g["cuda_driver_version"] = gpu.cuda_driver_version;
  } else {
    g["reason"] = gpu.reason;
  }
  if (!gpu.cublas_version.empty()) g["cublas_version"] = gpu.cublas_version;
  if (!gpu.nccl_version.empty()) g["nccl_version"] = gpu.nccl_version;
  env["gpu"] = g;

  json list = json::array();
  for (const auto& s : controls.settings()) {
    json c = {{"name", s.name}, {"value", s.value}, {"origin", ControlOriginName(s.origin)}};
    if (!s.source.empty()) c["source"] = s.source;
    if (!s.warning.empty()) c["warning"] = s.warning;
    list.push_back(c);
  }
  env["controls"] = list;
  env["collected_unix_ns"] = std::chrono::duration_cast<std::chrono::nanoseconds>(
                                 std::chrono::system_clock::now().time_since_epoch())
                                 .count();
  return env;
}

uint64_t EnvironmentDigest(const nlohmann::json& environment) {
  nlohmann::json stable = environment;
  stable.erase("collected_unix_ns");
  if (stable.contains("host")) stable["host"].erase("hostname");
  // nlohmann::json keeps object keys sorted, so dump() is canonical.
  const std::string text = stable.dump();
  return Xxh3(text.data(), text.size());
}

}  // namespace dgrr
