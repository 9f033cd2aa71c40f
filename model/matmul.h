// Deterministic dense matrix multiply for the reference GPT.
//
// Every output element is summed in ONE fixed order, whatever the blocking,
// the vector width the CPU offers, the number of rows in the call or the
// number of threads:
//
//     c[m][n] = (accumulate ? c[m][n] : 0) + A(m,0)*B(0,n) + A(m,1)*B(1,n) + ... + A(m,K-1)*B(K-1,n)
//
// evaluated strictly left to right, each term one fused multiply-add
// (acc = fma(A(m,k), B(k,n), acc): one rounding per term, model/numerics.h;
// the double path, a test oracle, keeps a separate multiply and add). The
// build has -ffp-contract=off, so the compiler fuses nothing else. The kernel keeps
// k outermost inside a register tile and vectorises across n, the contiguous
// dimension of the output; lanes of a vector hold different output elements,
// never partial sums of one element, so vectorisation cannot change results.
// Blocking k is allowed because a partial sum is stored to c as the same float
// the register held and the next block continues from it. Row m of c depends
// on row m of A and on B only, so stacking several examples' rows into one
// call gives each example exactly the bits it gets alone (tested).
// MatmulReference() is the plain triple loop with that same order, and the
// two agree bitwise (tested).
#pragma once

#include <cstddef>

namespace dgrr::model {

// c[M,N] (+)= a[M,K] . b[K,N]; all row-major and contiguous.
template <typename S>
void Gemm(S* c, const S* a, const S* b, int M, int K, int N, bool accumulate);

// c[M,N] (+)= a^T . b where a is stored [K,M] (e.g. dW = inp^T . dout without
// materialising the transpose).
template <typename S>
void GemmTransA(S* c, const S* a, const S* b, int M, int K, int N, bool accumulate);

// c[M,N] = a0^T . b0 + a1^T . b1, each product exactly GemmTransA's (written,
// not accumulated) and the two floats then added: what the canonical tree's
// first level makes of two examples' weight gradients, computed with c
// stored once instead of each product stored to its own buffer (one of the
// two is never written). The operands are laid out as GemmTransA's.
template <typename S>
void GemmTransAPairSum(S* c, const S* a0, const S* b0, const S* a1, const S* b1, int M, int K,
                       int N);

// c[M,N] (+)= a . b^T where b is stored [N,K] (e.g. dinp = dout . W^T, or the
// LM head's inp . wte^T).
template <typename S>
void GemmTransB(S* c, const S* a, const S* b, int M, int K, int N, bool accumulate);

// The general form: A(m,k) = a[m*a_rs + k*a_cs], B(k,n) = b[k*b_rs + n*b_cs],
// c[m*ldc + n]; for operands inside larger tensors (one attention head's
// q, k or v inside qkv).
template <typename S>
void GemmStrided(S* c, int ldc, const S* a, std::ptrdiff_t a_rs, std::ptrdiff_t a_cs, const S* b,
                 std::ptrdiff_t b_rs, std::ptrdiff_t b_cs, int M, int K, int N, bool accumulate);

// The same contract, written as the textbook triple loop (the benchmark's
// baseline and the tests' oracle). Transposed operands as above.
template <typename S>
void MatmulReference(S* c, const S* a, const S* b, int M, int K, int N, bool accumulate,
                     bool trans_a = false, bool trans_b = false);

// The float kernel's instruction sets. Gemm dispatches at run time to the
// widest the CPU supports; all give identical bits, because each lane runs
// the same per-element sequence of fused multiply-adds (tested). kAvx2 and
// kAvx512 need the CPU's FMA instructions too; kSse2 is the portable build
// (x86-64 baseline, libm's fmaf).
enum class GemmIsa { kSse2, kAvx2, kAvx512 };
const char* GemmIsaName(GemmIsa isa);
bool CpuSupports(GemmIsa isa);
GemmIsa BestGemmIsa();
// Gemm with a chosen instruction set (which the CPU must support).
void GemmFloatWith(GemmIsa isa, float* c, const float* a, const float* b, int M, int K, int N,
                   bool accumulate, bool trans_a = false, bool trans_b = false);

// The SSE2 (4-lane) float kernel, whatever the CPU supports.
void GemmFloatBaseline(float* c, const float* a, const float* b, int M, int K, int N,
                       bool accumulate);
bool CpuHasAvx2();  // AVX2 and FMA

// While one lives, Gemm, GemmTransA, GemmTransB and GemmStrided on this
// thread use `isa` (or the widest below it the CPU supports) instead of the
// widest: the model engine's vector build (ExampleEngine::set_vector_isa)
// then chooses its products' kernel too. Nests; not copyable.
class ScopedGemmIsa {
 public:
  explicit ScopedGemmIsa(GemmIsa isa);
  ~ScopedGemmIsa();
  ScopedGemmIsa(const ScopedGemmIsa&) = delete;
  ScopedGemmIsa& operator=(const ScopedGemmIsa&) = delete;

 private:
  int previous_;
};

// out[cols,rows] = in[rows,cols] transposed.
template <typename S>
void Transpose(S* out, const S* in, int rows, int cols);

}  // namespace dgrr::model
