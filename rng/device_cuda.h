// Internal: the CUDA runtime calls behind rng/device.h, kept free of
// base/status.h so nvcc only compiles the kernel and its plain C++ helpers.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "rng/draw_set.h"

namespace dgrr::rng::cuda_detail {

// Visible CUDA devices, or -1 with *error set when the runtime fails.
int DeviceCount(std::string* error);
// Runs the draw kernel; returns "" on success, else what failed.
std::string Draw(const std::vector<PhiloxStream>& streams, size_t per_stream, uint64_t threshold,
                 DrawSet* out);

}  // namespace dgrr::rng::cuda_detail
