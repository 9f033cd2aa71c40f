// Built with CUDA: the Status-returning front of rng/device_cuda.h.
#include "rng/device.h"

#include "rng/device_cuda.h"

namespace dgrr::rng {

bool CudaDeviceAvailable(std::string* reason) {
  std::string error;
  const int count = cuda_detail::DeviceCount(&error);
  if (count < 0) {
    *reason = "cudaGetDeviceCount failed: " + error;
    return false;
  }
  if (count == 0) {
    *reason = "cudaGetDeviceCount returned 0 devices";
    return false;
  }
  return true;
}

StatusOr<DrawSet> DrawOnDevice(const std::vector<PhiloxStream>& streams, size_t per_stream,
                               uint64_t threshold) {
  std::string reason;
  if (!CudaDeviceAvailable(&reason)) return Status::FailedPrecondition("rng: " + reason);
  DrawSet set;
  const std::string error = cuda_detail::Draw(streams, per_stream, threshold, &set);
  if (!error.empty()) return Status::Internal("rng: DrawOnDevice: " + error);
  return set;
}

}  // namespace dgrr::rng
