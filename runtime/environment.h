// The environment fingerprint: everything about the machine and build that can
// change a training run's bits (dgrr build, compiler and flags, CPU, thread
// count, CUDA/cuBLAS/NCCL versions, GPU, and every determinism control with
// its origin). Written into the run directory as JSON and digested into each
// trace header, so `dgrr compare` can name environment differences first.
//
// Schema: docs/environment.md ("dgrr.env/1").
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

#include "runtime/determinism.h"

namespace dgrr {

inline constexpr const char* kEnvironmentSchema = "dgrr.env/1";

struct GpuInfo {
  bool available = false;
  std::string reason;        // why not, when unavailable ("CPU-only build", "no CUDA device")
  int device_count = 0;
  std::string name;          // of device 0
  int sm_count = 0;
  int compute_capability = 0;  // major*10 + minor
  int cuda_runtime_version = 0;
  int cuda_driver_version = 0;
  std::string cublas_version;
  std::string nccl_version;
};
// Queries the CUDA runtime; never fails (unavailability is recorded).
GpuInfo QueryGpuInfo();

// The fingerprint as JSON. `controls` are the determinism controls in force.
nlohmann::json CollectEnvironment(const DeterminismControls& controls);

// 64-bit digest of the fields that can change results (everything except the
// host name and the collection time), over a canonical serialisation.
uint64_t EnvironmentDigest(const nlohmann::json& environment);

// The CPU model string from /proc/cpuinfo ("unknown" when not found).
std::string CpuModelName();

}  // namespace dgrr
