// AdamW's per-element update (model/adamw.h describes it), the one
// definition the CPU loop and the device kernel (model/kernels.h) share; a
// header of its own so that device code includes it without the rest of the
// optimizer.
#pragma once

#include "model/det_math.h"
#include "model/numerics.h"

namespace dgrr::model {

// The step's float coefficients (one_minus_b1 = 1 - b1 in float, c1 and c2
// as model/adamw.h says).
struct AdamWCoefficients {
  float b1, b2, one_minus_b1, one_minus_b2, c1, c2, lr, eps, wd;
};

// One element's update, in the order model/adamw.h writes.
DGRR_HD inline void AdamWUpdateAt(const AdamWCoefficients& k, float& p, float& m, float& v,
                                  float g) {
  m = Fma(k.b1, m, k.one_minus_b1 * g);
  v = Fma(k.b2, v, (k.one_minus_b2 * g) * g);
  const float m_hat = m / k.c1;
  const float v_hat = v / k.c2;
  p = Fma(-k.lr, Fma(k.wd, p, m_hat / (Sqrt(v_hat) + k.eps)), p);
}

}  // namespace dgrr::model
