// The reference model's canonical arithmetic: one fused multiply-add per
// product term, in a fixed order, on every CPU and on the device.
//
// Every product that is added to something in the float model (a dot
// product's term, a Horner step, a layernorm's scale and shift, an AdamW
// moment) is ONE correctly rounded fma(a, b, c) = round(a * b + c), never a
// rounded multiply followed by a rounded add. fma is exact by definition, so
// every implementation gives the same bits:
//   - on CPUs with FMA (x86-64 since 2013) the vector builds
//     (model/vector_isa.h, model/matmul.cc) compile it to vfmadd;
//   - on CPUs without, the portable build calls libm's fmaf (correctly
//     rounded, slow);
//   - on the device, __fmaf_rn.
// The build keeps -ffp-contract=off: the compiler never fuses on its own, so
// an fma is where the source says Fma() and nowhere else.
//
// This header is the one definition host and device code share: functions
// marked DGRR_HD compile as __host__ __device__ under nvcc and as plain
// inline functions elsewhere. Device code is built with --fmad=false (the
// top-level CMakeLists.txt), nvcc's -ffp-contract=off: checked by hand with
// nvcc 13 for sm_90, the element functions (ExpF, TanhF, LogF, GeluAt,
// GeluGradAt, AdamWUpdateAt) compile to fma.rn, mul.rn, div.rn and sqrt.rn
// only, each correctly rounded, as on the host.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

#include "base/host_device.h"

// Unroll the next loop 8 times, in the dialect of the compiler at hand.
#if defined(__CUDACC__)
#define DGRR_UNROLL_8 _Pragma("unroll 8")
#else
#define DGRR_UNROLL_8 _Pragma("GCC unroll 8")
#endif

namespace dgrr::model {

// The version of the model's arithmetic (docs/model.md, "Numerics version"):
// a run records it in config.json and only a dgrr of the same version
// resumes or re-executes it. 1: separate multiply and add (-ffp-contract=off,
// no fma), the runs recorded before config.json had the key. 2: one fma per
// product term, as described above.
inline constexpr int kNumericsVersion = 2;

// round(a * b + c), one rounding.
DGRR_HD inline float Fma(float a, float b, float c) {
#if defined(__CUDA_ARCH__)
  return __fmaf_rn(a, b, c);
#else
  return __builtin_fmaf(a, b, c);
#endif
}

// The double path of the layer templates is the finite-difference oracle
// (tests), never recorded and never compared bit for bit with anything: it
// keeps the plain multiply and add, which every CPU runs at full speed.
DGRR_HD inline double Fma(double a, double b, double c) { return a * b + c; }

// The float's bit pattern and back (memcpy on the host; nvcc's intrinsics on
// the device).
DGRR_HD inline uint32_t FloatBits(float f) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(f);
#else
  uint32_t bits;
  std::memcpy(&bits, &f, sizeof bits);
  return bits;
#endif
}
DGRR_HD inline float BitsFloat(uint32_t bits) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(bits);
#else
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
#endif
}

}  // namespace dgrr::model
