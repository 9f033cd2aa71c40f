#include "runtime/cublas_handle.h"

#if DGRR_RUNTIME_CUDA
#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#endif

namespace dgrr {

#if DGRR_RUNTIME_CUDA
namespace {
Status CublasError(const char* what, cublasStatus_t st) {
  return Status::FailedPrecondition(std::string(what) + " failed: " + cublasGetStatusString(st));
}
}  // namespace

StatusOr<CublasHandle> CublasHandle::Create() {
  int devices = 0;
  cudaError_t err = cudaGetDeviceCount(&devices);
  if (err != cudaSuccess || devices == 0) {
    return Status::FailedPrecondition(std::string("no CUDA device: ") +
                                      (err != cudaSuccess ? cudaGetErrorString(err) : "none found"));
  }
  cublasHandle_t h = nullptr;
  if (cublasStatus_t st = cublasCreate(&h); st != CUBLAS_STATUS_SUCCESS) {
    return CublasError("cublasCreate", st);
  }
  CublasHandle handle(h);
  if (cublasStatus_t st = cublasSetMathMode(h, CUBLAS_PEDANTIC_MATH); st != CUBLAS_STATUS_SUCCESS) {
    return CublasError("cublasSetMathMode(CUBLAS_PEDANTIC_MATH)", st);
  }
  if (cublasStatus_t st = cublasSetAtomicsMode(h, CUBLAS_ATOMICS_NOT_ALLOWED);
      st != CUBLAS_STATUS_SUCCESS) {
    return CublasError("cublasSetAtomicsMode(CUBLAS_ATOMICS_NOT_ALLOWED)", st);
  }
  return handle;
}

CublasHandle::~CublasHandle() {
  if (handle_ != nullptr) cublasDestroy(static_cast<cublasHandle_t>(handle_));
}

StatusOr<CublasHandle::Settings> CublasHandle::QuerySettings() const {
  auto h = static_cast<cublasHandle_t>(handle_);
  cublasMath_t math{};
  cublasAtomicsMode_t atomics{};
  if (cublasStatus_t st = cublasGetMathMode(h, &math); st != CUBLAS_STATUS_SUCCESS) {
    return CublasError("cublasGetMathMode", st);
  }
  if (cublasStatus_t st = cublasGetAtomicsMode(h, &atomics); st != CUBLAS_STATUS_SUCCESS) {
    return CublasError("cublasGetAtomicsMode", st);
  }
  Settings s;
  s.pedantic_math = (static_cast<int>(math) & 0xf) == CUBLAS_PEDANTIC_MATH;
  s.atomics_allowed = atomics == CUBLAS_ATOMICS_ALLOWED;
  return s;
}
#else
StatusOr<CublasHandle> CublasHandle::Create() {
  return Status::FailedPrecondition("no CUDA device: CPU-only build");
}
CublasHandle::~CublasHandle() = default;
StatusOr<CublasHandle::Settings> CublasHandle::QuerySettings() const {
  return Status::FailedPrecondition("CPU-only build");
}
#endif

CublasHandle& CublasHandle::operator=(CublasHandle&& other) noexcept {
  if (this != &other) {
    CublasHandle old(handle_);
    handle_ = other.handle_;
    other.handle_ = nullptr;
  }
  return *this;
}

}  // namespace dgrr
