// Whether a test that needs a CUDA device can run here, and why not. Include
// only where CUDA is built (the file includes <cuda_runtime.h>).
#pragma once

#include <cuda_runtime.h>

#include <string>

namespace dgrr::test_support {

inline bool HaveCudaDevice(std::string* why) {
  int count = 0;
  const cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess) {
    *why = std::string("cudaGetDeviceCount failed: ") + cudaGetErrorString(err);
    return false;
  }
  if (count == 0) {
    *why = "cudaGetDeviceCount returned 0";
    return false;
  }
  return true;
}

}  // namespace dgrr::test_support

// Skips the current test, printing why, where there is no CUDA device.
#define DGRR_SKIP_WITHOUT_CUDA_DEVICE()                                                       \
  do {                                                                                        \
    std::string dgrr_why_;                                                                    \
    if (!::dgrr::test_support::HaveCudaDevice(&dgrr_why_)) GTEST_SKIP() << "no CUDA device: " << dgrr_why_; \
  } while (0)
