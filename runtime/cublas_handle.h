// Deterministic cuBLAS handles. Every handle the runtime hands out has TF32
// disabled (CUBLAS_PEDANTIC_MATH: no reduced-precision shortcuts) and atomics
// disallowed (CUBLAS_ATOMICS_NOT_ALLOWED: no accumulation in arrival order).
// With CUBLAS_WORKSPACE_CONFIG pinned by the session's controls, cuBLAS then
// returns the same bits run after run on the same GPU and library version.
//
// The header needs no CUDA headers: the handle is carried as an opaque pointer
// (cast it to cublasHandle_t in CUDA code).
#pragma once

#include "base/status.h"

namespace dgrr {

class CublasHandle {
 public:
  // Creates a handle on the current device with the settings above.
  // Unavailable (CPU-only build, no device): FailedPrecondition saying why.
  static StatusOr<CublasHandle> Create();

  CublasHandle(CublasHandle&& other) noexcept : handle_(other.handle_) { other.handle_ = nullptr; }
  CublasHandle& operator=(CublasHandle&& other) noexcept;
  CublasHandle(const CublasHandle&) = delete;
  CublasHandle& operator=(const CublasHandle&) = delete;
  ~CublasHandle();

  void* get() const { return handle_; }  // a cublasHandle_t

  // Reads the handle's settings back (tests, and the session's self-check).
  struct Settings {
    bool pedantic_math = false;
    bool atomics_allowed = true;
  };
  StatusOr<Settings> QuerySettings() const;

  // cublasSgemmStridedBatched on this handle (column-major; transpose_*:
  // CUBLAS_OP_T, else CUBLAS_OP_N). cuBLAS is opened on first use, not
  // linked (cublas_handle.cc says why), so its calls go through here.
  Status SgemmStridedBatched(bool transpose_a, bool transpose_b, int m, int n, int k, const float* alpha,
                             const float* a, int lda, long long stride_a, const float* b, int ldb,
                             long long stride_b, const float* beta, float* c, int ldc, long long stride_c,
                             int batch) const;

 private:
  explicit CublasHandle(void* handle) : handle_(handle) {}
  void* handle_ = nullptr;
};

}  // namespace dgrr
