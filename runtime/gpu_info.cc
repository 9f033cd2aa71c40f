// GPU facts for the environment fingerprint. Compiled with the CUDA runtime,
// cuBLAS and NCCL when the build has CUDA; otherwise it reports a CPU-only build.
#include "runtime/environment.h"

#if DGRR_RUNTIME_CUDA
#include <cublas_api.h>
#include <cuda_runtime_api.h>
#include <library_types.h>
#include <nccl.h>
#endif

namespace dgrr {

GpuInfo QueryGpuInfo() {
  GpuInfo info;
#if DGRR_RUNTIME_CUDA
  int major = 0, minor = 0, patch = 0;
  if (cublasGetProperty(MAJOR_VERSION, &major) == CUBLAS_STATUS_SUCCESS &&
      cublasGetProperty(MINOR_VERSION, &minor) == CUBLAS_STATUS_SUCCESS &&
      cublasGetProperty(PATCH_LEVEL, &patch) == CUBLAS_STATUS_SUCCESS) {
    info.cublas_version =
        std::to_string(major) + "." + std::to_string(minor) + "." + std::to_string(patch);
  }
  int nccl = 0;
  if (ncclGetVersion(&nccl) == ncclSuccess) {
    // NCCL >= 2.9 encodes versions as major*10000 + minor*100 + patch.
    info.nccl_version = std::to_string(nccl / 10000) + "." + std::to_string(nccl / 100 % 100) +
                        "." + std::to_string(nccl % 100);
  }
  cudaRuntimeGetVersion(&info.cuda_runtime_version);
  cudaDriverGetVersion(&info.cuda_driver_version);
  cudaError_t err = cudaGetDeviceCount(&info.device_count);
  if (err != cudaSuccess || info.device_count == 0) {
    info.reason = err != cudaSuccess ? std::string("no CUDA device: ") + cudaGetErrorString(err)
                                     : "no CUDA device";
    info.device_count = 0;
    return info;
  }
  cudaDeviceProp prop{};
  if (cudaGetDeviceProperties(&prop, 0) != cudaSuccess) {
    info.reason = "cudaGetDeviceProperties failed";
    return info;
  }
  info.available = true;
  info.name = prop.name;
  info.sm_count = prop.multiProcessorCount;
  info.compute_capability = prop.major * 10 + prop.minor;
#else
  info.reason = "CPU-only build";
#endif
  return info;
}

}  // namespace dgrr
