// Deterministic dense matrix multiply for the reference GPT.
//
// Every output element is summed in ONE fixed order, whatever the blocking,
// the vector width the CPU offers or the number of threads:
//
//     c[m][n] = (accumulate ? c[m][n] : 0) + a[m][0]*b[0][n] + a[m][1]*b[1][n] + ... + a[m][K-1]*b[K-1][n]
//
// evaluated strictly left to right, one rounding per multiply and one per add
// (the build has -ffp-contract=off, so no fused multiply-add). The kernel keeps
// k outermost inside a register tile and vectorises across n, the contiguous
// dimension of the output; lanes of a vector hold different output elements,
// never partial sums of one element, so vectorisation cannot change results.
// MatmulReference() is the plain triple loop with that same order, and the two
// agree bitwise (tested).
#pragma once

#include <cstddef>

namespace dgrr::model {

// c[M,N] (+)= a[M,K] . b[K,N]; all row-major and contiguous.
template <typename S>
void Gemm(S* c, const S* a, const S* b, int M, int K, int N, bool accumulate);

// The same contract, written as the textbook triple loop (the benchmark's
// baseline and the tests' oracle).
template <typename S>
void MatmulReference(S* c, const S* a, const S* b, int M, int K, int N, bool accumulate);

// The SSE2 (4-lane) float kernel, whatever the CPU supports: lets tests check
// that both dispatch targets give the same bits.
void GemmFloatBaseline(float* c, const float* a, const float* b, int M, int K, int N,
                       bool accumulate);
bool CpuHasAvx2();

// out[cols,rows] = in[rows,cols] transposed.
template <typename S>
void Transpose(S* out, const S* in, int rows, int cols);

}  // namespace dgrr::model
