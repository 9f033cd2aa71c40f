// Built when CUDA is not available (no nvcc, or the sanitizer build).
#include "rng/device.h"

namespace dgrr::rng {

bool CudaDeviceAvailable(std::string* reason) {
  *reason = "this build has no CUDA (DGRR_HAVE_CUDA is OFF)";
  return false;
}

StatusOr<DrawSet> DrawOnDevice(const std::vector<PhiloxStream>&, size_t, uint64_t) {
  return Status::FailedPrecondition("rng: DrawOnDevice: this build has no CUDA");
}

}  // namespace dgrr::rng
