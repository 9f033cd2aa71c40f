// Runs a piece of the model's float code compiled for the widest vector
// instruction set the CPU offers, chosen at run time (the build itself stays
// at the x86-64 baseline: no -march).
//
// RunWithBestIsa(body) calls body() through a function built with
// [[gnu::target(...)]] and [[gnu::flatten]]: everything body calls that the
// compiler can see (the layer templates, det_math.h) is inlined into that
// function and vectorised there with 16 (AVX-512) or 8 (AVX2) float lanes
// instead of SSE2's 4, and every Fma() (model/numerics.h) becomes one
// vfmadd instruction. Bits cannot change: the compiler vectorises only
// across independent elements (it never reassociates a float sum without
// -ffast-math, and the model keeps every reduction a scalar loop), each lane
// runs the same IEEE multiplies, adds, divides, square roots and fused
// multiply-adds as the scalar code, and -ffp-contract=off keeps the compiler
// from fusing anything the source did not write as Fma(). The portable build
// (x86-64 baseline, no FMA instructions) calls libm's fmaf for each Fma():
// the same correctly rounded result, slowly. The golden fingerprints
// (tests/model/golden_test.cc) and the per-ISA checks of
// tests/model/gpt_test.cc hold it to that.
#pragma once

#include "base/cpu_isa.h"
#include "model/matmul.h"

namespace dgrr::model {

// AVX-512 here is the F, BW, VL and DQ subsets every AVX-512 CPU since
// Skylake-X has: without BW the compiler cannot vectorise the loops that
// read byte masks (dropout) with 16-lane floats.
template <typename Body>
[[gnu::target("avx512f,avx512bw,avx512vl,avx512dq,fma"), gnu::flatten]] void RunWithAvx512(
    const Body& body) {
  body();
}

inline bool CpuHasAvx512ForLayers() {
  static const bool has = IsaAllowed(IsaLevel::kAvx512) && __builtin_cpu_supports("avx512f") &&
                          __builtin_cpu_supports("avx512bw") &&
                          __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq");
  return has;
}

template <typename Body>
[[gnu::target("avx2,fma"), gnu::flatten]] void RunWithAvx2(const Body& body) {
  body();
}

template <typename Body>
void RunWithIsa(GemmIsa isa, const Body& body) {
  switch (isa) {
    case GemmIsa::kAvx512:
      if (CpuHasAvx512ForLayers()) return RunWithAvx512(body);
      [[fallthrough]];  // an AVX-512 CPU without BW, VL and DQ: AVX2 (it has that)
    case GemmIsa::kAvx2:
      if (CpuSupports(GemmIsa::kAvx2)) return RunWithAvx2(body);  // AVX2 and FMA
      [[fallthrough]];  // asked for more than the CPU has: the same bits, no SIGILL
    case GemmIsa::kSse2: return body();
  }
}

template <typename Body>
void RunWithBestIsa(const Body& body) {
  RunWithIsa(BestGemmIsa(), body);
}

}  // namespace dgrr::model
