// GPU side of dgrr rng: the same streams drawn by CUDA threads, used by the
// host-vs-device test. The kernels include rng/distributions.h, so they run
// the very code the host runs (DGRR_HD = __host__ __device__ under nvcc).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "base/status.h"
#include "rng/draw_set.h"
#include "rng/philox_stream.h"

namespace dgrr::rng {

// True when this build has CUDA and a device is visible; otherwise false with
// the reason in *reason (no CUDA in the build, cudaGetDeviceCount error, 0 devices).
bool CudaDeviceAvailable(std::string* reason);

// One CUDA thread per stream. FailedPrecondition without CUDA or a device.
StatusOr<DrawSet> DrawOnDevice(const std::vector<PhiloxStream>& streams, size_t per_stream,
                               uint64_t threshold);

}  // namespace dgrr::rng
