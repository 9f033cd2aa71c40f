// GPU facts for the environment fingerprint. Compiled with the CUDA runtime,
// cuBLAS (opened on first use) and NCCL when the build has CUDA; otherwise it
// reports a CPU-only build.
#include "runtime/environment.h"

#if DGRR_RUNTIME_CUDA
#include <cublas_api.h>
#include <cuda_runtime_api.h>
#include <dlfcn.h>
#include <library_types.h>
#include <nccl.h>
#endif

namespace dgrr {

#if DGRR_RUNTIME_CUDA
namespace {

// cuBLAS is opened here, on first use, rather than linked: loading it pulls
// in cublasLt, whose static initialisers cost ~100 ms and ~200 MB of touched
// pages in every process that links it, though only `dgrr env` and a
// training run's environment fingerprint ever ask it anything. The soname
// is the one this build compiled against; the search path is the one the
// dynamic linker would have used for it.
using CublasGetPropertyFn = cublasStatus_t (*)(libraryPropertyType, int*);
CublasGetPropertyFn LoadCublasGetProperty() {
  const std::string soname = "libcublas.so." + std::to_string(CUBLAS_VER_MAJOR);
  void* library = ::dlopen(soname.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (library == nullptr) return nullptr;  // then no cuBLAS version is reported
  return reinterpret_cast<CublasGetPropertyFn>(::dlsym(library, "cublasGetProperty"));
}

}  // namespace
#endif

GpuInfo QueryGpuInfo() {
  GpuInfo info;
#if DGRR_RUNTIME_CUDA
  int major = 0, minor = 0, patch = 0;
  static const CublasGetPropertyFn get_property = LoadCublasGetProperty();
  if (get_property != nullptr && get_property(MAJOR_VERSION, &major) == CUBLAS_STATUS_SUCCESS &&
      get_property(MINOR_VERSION, &minor) == CUBLAS_STATUS_SUCCESS &&
      get_property(PATCH_LEVEL, &patch) == CUBLAS_STATUS_SUCCESS) {
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
