// Learning-rate schedule: linear warmup, then cosine decay to a floor.
//
//   step < warmup:           lr = max_lr * (step + 1) / warmup
//   warmup <= step < total:  r = (step - warmup) / (total - warmup)
//                            lr = min_lr + 0.5 * (1 + cos(pi * r)) * (max_lr - min_lr)
//   step >= total:           lr = min_lr
//
// Evaluated in double (cos by CosPi, no libm) and rounded once to float;
// `step` counts from 0.
#pragma once

#include <cstdint>

#include "model/det_math.h"

namespace dgrr::model {

struct LrSchedule {
  float max_lr = 1e-3f;
  float min_lr = 1e-4f;
  int64_t warmup_steps = 0;
  int64_t total_steps = 1;

  float At(int64_t step) const {
    const double hi = max_lr, lo = min_lr;
    if (step < warmup_steps) {
      return static_cast<float>(hi * static_cast<double>(step + 1) / static_cast<double>(warmup_steps));
    }
    if (step >= total_steps) return min_lr;
    const double ratio = static_cast<double>(step - warmup_steps) /
                         static_cast<double>(total_steps - warmup_steps);
    const double coeff = 0.5 * (1.0 + CosPi(ratio));  // not libm: see det_math.h
    return static_cast<float>(lo + coeff * (hi - lo));
  }
};

}  // namespace dgrr::model
