#include "runtime/cublas_handle.h"

#include <type_traits>

#if DGRR_RUNTIME_CUDA
#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <dlfcn.h>
#endif

#include <string>

namespace dgrr {

#if DGRR_RUNTIME_CUDA
namespace {

// cuBLAS is opened on first use, not linked: loading it pulls in cublasLt,
// whose static initialisers cost ~80-100 ms and ~200 MB of touched pages in
// every process that links it (every `dgrr` command), though only
// `--gemm cublas` runs anything on it (runtime/gpu_info.cc opens it for its
// version the same way). The soname is the one this build compiled
// against. The names are those cublas_v2.h maps the calls to
// (cublasCreate -> cublasCreate_v2).
#define DGRR_CUBLAS_NAME2(f) #f
#define DGRR_CUBLAS_NAME(f) DGRR_CUBLAS_NAME2(f)
struct CublasApi {
  decltype(&cublasCreate) create = nullptr;
  decltype(&cublasDestroy) destroy = nullptr;
  decltype(&cublasSetMathMode) set_math_mode = nullptr;
  decltype(&cublasGetMathMode) get_math_mode = nullptr;
  decltype(&cublasSetAtomicsMode) set_atomics_mode = nullptr;
  decltype(&cublasGetAtomicsMode) get_atomics_mode = nullptr;
  decltype(&cublasGetStatusString) status_string = nullptr;
  decltype(&cublasSgemmStridedBatched) sgemm_strided_batched = nullptr;
  std::string error;  // why it is not there
};

const CublasApi& Cublas() {
  static const CublasApi api = [] {
    CublasApi a;
    const std::string soname = "libcublas.so." + std::to_string(CUBLAS_VER_MAJOR);
    void* library = ::dlopen(soname.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (library == nullptr) {
      const char* why = ::dlerror();
      a.error = "cannot open " + soname + (why != nullptr ? std::string(": ") + why : std::string());
      return a;
    }
    bool missing = false;
    auto load = [&](auto& fn, const char* name) {
      fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(::dlsym(library, name));
      if (fn == nullptr && !missing) {
        missing = true;
        a.error = soname + " has no " + name;
      }
    };
    load(a.create, DGRR_CUBLAS_NAME(cublasCreate));
    load(a.destroy, DGRR_CUBLAS_NAME(cublasDestroy));
    load(a.set_math_mode, DGRR_CUBLAS_NAME(cublasSetMathMode));
    load(a.get_math_mode, DGRR_CUBLAS_NAME(cublasGetMathMode));
    load(a.set_atomics_mode, DGRR_CUBLAS_NAME(cublasSetAtomicsMode));
    load(a.get_atomics_mode, DGRR_CUBLAS_NAME(cublasGetAtomicsMode));
    load(a.status_string, DGRR_CUBLAS_NAME(cublasGetStatusString));
    load(a.sgemm_strided_batched, DGRR_CUBLAS_NAME(cublasSgemmStridedBatched));
    if (missing) a.create = nullptr;  // refuse a partial library as a whole
    return a;
  }();
  return api;
}
#undef DGRR_CUBLAS_NAME
#undef DGRR_CUBLAS_NAME2

Status CublasError(const char* what, cublasStatus_t st) {
  const char* text = Cublas().status_string != nullptr ? Cublas().status_string(st) : "unknown status";
  return Status::FailedPrecondition(std::string(what) + " failed: " + text);
}
}  // namespace

StatusOr<CublasHandle> CublasHandle::Create() {
  int devices = 0;
  cudaError_t err = cudaGetDeviceCount(&devices);
  if (err != cudaSuccess || devices == 0) {
    return Status::FailedPrecondition(std::string("no CUDA device: ") +
                                      (err != cudaSuccess ? cudaGetErrorString(err) : "none found"));
  }
  const CublasApi& api = Cublas();
  if (api.create == nullptr) return Status::FailedPrecondition("cuBLAS unavailable: " + api.error);
  cublasHandle_t h = nullptr;
  if (cublasStatus_t st = api.create(&h); st != CUBLAS_STATUS_SUCCESS) {
    return CublasError("cublasCreate", st);
  }
  CublasHandle handle(h);
  if (cublasStatus_t st = api.set_math_mode(h, CUBLAS_PEDANTIC_MATH); st != CUBLAS_STATUS_SUCCESS) {
    return CublasError("cublasSetMathMode(CUBLAS_PEDANTIC_MATH)", st);
  }
  if (cublasStatus_t st = api.set_atomics_mode(h, CUBLAS_ATOMICS_NOT_ALLOWED); st != CUBLAS_STATUS_SUCCESS) {
    return CublasError("cublasSetAtomicsMode(CUBLAS_ATOMICS_NOT_ALLOWED)", st);
  }
  return handle;
}

CublasHandle::~CublasHandle() {
  // A handle exists only once the library was opened.
  if (handle_ != nullptr) Cublas().destroy(static_cast<cublasHandle_t>(handle_));
}

StatusOr<CublasHandle::Settings> CublasHandle::QuerySettings() const {
  auto h = static_cast<cublasHandle_t>(handle_);
  cublasMath_t math{};
  cublasAtomicsMode_t atomics{};
  if (cublasStatus_t st = Cublas().get_math_mode(h, &math); st != CUBLAS_STATUS_SUCCESS) {
    return CublasError("cublasGetMathMode", st);
  }
  if (cublasStatus_t st = Cublas().get_atomics_mode(h, &atomics); st != CUBLAS_STATUS_SUCCESS) {
    return CublasError("cublasGetAtomicsMode", st);
  }
  Settings s;
  s.pedantic_math = (static_cast<int>(math) & 0xf) == CUBLAS_PEDANTIC_MATH;
  s.atomics_allowed = atomics == CUBLAS_ATOMICS_ALLOWED;
  return s;
}

Status CublasHandle::SgemmStridedBatched(bool transpose_a, bool transpose_b, int m, int n, int k,
                                         const float* alpha, const float* a, int lda, long long stride_a,
                                         const float* b, int ldb, long long stride_b, const float* beta,
                                         float* c, int ldc, long long stride_c, int batch) const {
  const cublasStatus_t st = Cublas().sgemm_strided_batched(
      static_cast<cublasHandle_t>(handle_), transpose_a ? CUBLAS_OP_T : CUBLAS_OP_N,
      transpose_b ? CUBLAS_OP_T : CUBLAS_OP_N, m, n, k, alpha, a, lda, stride_a, b, ldb, stride_b, beta, c, ldc,
      stride_c, batch);
  return st == CUBLAS_STATUS_SUCCESS ? Status() : CublasError("cublasSgemmStridedBatched", st);
}
#else
StatusOr<CublasHandle> CublasHandle::Create() {
  return Status::FailedPrecondition("no CUDA device: CPU-only build");
}
CublasHandle::~CublasHandle() = default;
StatusOr<CublasHandle::Settings> CublasHandle::QuerySettings() const {
  return Status::FailedPrecondition("CPU-only build");
}
Status CublasHandle::SgemmStridedBatched(bool, bool, int, int, int, const float*, const float*, int, long long,
                                         const float*, int, long long, const float*, float*, int, long long,
                                         int) const {
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
