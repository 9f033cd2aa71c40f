// The CUDA launcher of the model's kernels (`--device cuda`): one __global__
// entry per kernel type, whose threads call the same DGRR_HD body
// (model/kernels.h) the grid emulator runs on the CPU, over device memory.
// Built with --fmad=false (the top-level CMakeLists.txt): the only fused
// multiply-adds are the source's Fma calls (__fmaf_rn). With `--gemm cublas`
// the plain products go to cuBLAS instead (GemmOnCublas).
#include <cublas_v2.h>  // types only: the calls go through CublasHandle (cuBLAS is dlopen'ed)
#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "model/grid.h"
#include "runtime/cublas_handle.h"

namespace dgrr::model {
namespace {

template <typename K>
__global__ void KernelEntry(K k) {
  kernels::ThreadCoords c;
  c.block_idx.x = blockIdx.x;
  c.thread_idx.x = threadIdx.x;
  c.block_dim.x = blockDim.x;
  c.grid_dim.x = gridDim.x;
  kernels::RunThread(k, c);
}

void Check(cudaError_t err, const char* what) {
  if (err == cudaSuccess) return;
  // A failed launch or copy mid-step leaves nothing to recover: say what.
  std::fprintf(stderr, "dgrr::model: cuda: %s: %s\n", what, cudaGetErrorString(err));
  std::abort();
}

template <typename K>
void LaunchOnDevice(const K& k) {
  const size_t threads = k.threads();
  if (threads == 0) return;
  const unsigned block = kernels::kBlockThreads;
  const unsigned grid = static_cast<unsigned>((threads + block - 1) / block);
  KernelEntry<K><<<grid, block>>>(k);
  Check(cudaGetLastError(), "kernel launch");
}

void CheckCublas(const Status& status) {
  if (status.ok()) return;
  std::fprintf(stderr, "dgrr::model: cublas: %s\n", status.message().c_str());
  std::abort();
}

// c(m, n) += bias[n] over every row of every batch matrix, after cuBLAS's
// product: the exact kernel's order (the product, then the bias added).
__global__ void AddBias(kernels::View<float> c, const float* bias, int M, int N, size_t nb1, size_t nb2) {
  const size_t g = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (g >= nb1 * nb2 * static_cast<size_t>(M) * N) return;
  const size_t n = g % N, m = (g / N) % M, q = g / (static_cast<size_t>(M) * N);
  float* out = c.At(q / nb2, q % nb2, m, n);
  *out = *out + bias[n];
}

// One operand as cuBLAS sees it. The product is computed column-major as
// C^T (N x M) = B^T (N x K) . A^T (K x M), so a row-major operand (column
// stride 1) is taken as it is (CUBLAS_OP_N, leading dimension its row
// stride) and a transposed one (row stride 1) with CUBLAS_OP_T (leading
// dimension its column stride). False: neither stride is 1.
struct CublasOperand {
  cublasOperation_t op = CUBLAS_OP_N;
  int ld = 0;
};
// `as_is_rows`: the rows of the column-major matrix when the operand is taken
// as it is; `transposed_rows`: when it is taken transposed. cuBLAS wants a
// leading dimension of at least that many.
bool Describe(ptrdiff_t rs, ptrdiff_t cs, int as_is_rows, int transposed_rows, CublasOperand* out) {
  if (cs == 1 && rs >= as_is_rows && rs > 0) {
    *out = {CUBLAS_OP_N, static_cast<int>(rs)};
    return true;
  }
  if (rs == 1 && cs >= transposed_rows && cs > 0) {
    *out = {CUBLAS_OP_T, static_cast<int>(cs)};
    return true;
  }
  return false;
}

class CudaLauncher final : public Launcher {
 public:
  explicit CudaLauncher(std::optional<CublasHandle> cublas) : cublas_(std::move(cublas)) {
    if (cudaGetDevice(&ordinal_) != cudaSuccess) ordinal_ = 0;
  }
  int device_ordinal() const override { return ordinal_; }
  ~CudaLauncher() override {
    // Never aborts: a launcher that outlives the CUDA runtime (destroyed at
    // exit) only loses the times still pending.
    if (times_ && !pending_.empty() && cudaEventSynchronize(pending_.back().stop) == cudaSuccess) {
      AddPending(/*checked=*/false);
    }
    for (const Pending& p : pending_) cudaEventDestroy(p.start), cudaEventDestroy(p.stop);
    for (cudaEvent_t e : free_events_) cudaEventDestroy(e);
  }
  Device device() const override { return Device::kCuda; }
  bool host_memory() const override { return false; }
  void* Alloc(size_t bytes) override {
    void* p = nullptr;
    Check(cudaMalloc(&p, bytes == 0 ? 1 : bytes), "cudaMalloc");
    Check(cudaMemset(p, 0, bytes == 0 ? 1 : bytes), "cudaMemset");
    return p;
  }
  void Free(void* p) override { cudaFree(p); }
  void CopyToDevice(void* dst, const void* src, size_t bytes) override {
    Timed("copy to device", bytes, [&] {
      if (bytes) Check(cudaMemcpy(dst, src, bytes, cudaMemcpyHostToDevice), "cudaMemcpy to device");
    });
  }
  void CopyToHost(void* dst, const void* src, size_t bytes) override {
    Timed("copy to host", bytes, [&] {
      if (bytes) Check(cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToHost), "cudaMemcpy to host");
    });
  }
  void Synchronize() override {
    Check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
    if (times_) Drain();
  }
#define DGRR_DEFINE_LAUNCH(K) \
  void Launch(const kernels::K& k) override { Timed(#K, 0, [&] { LaunchOnDevice(k); }); }
  DGRR_MODEL_KERNELS_BUT_GEMM(DGRR_DEFINE_LAUNCH)
#undef DGRR_DEFINE_LAUNCH
  void Launch(const kernels::GemmKernel& k) override {
    const char* name = "GemmKernel";  // named once it is known who ran it
    Timed(name, 0, [&] {
      if (cublas_ && GemmOnCublas(k)) {
        name = "GemmKernel on cublas";
      } else {
        LaunchOnDevice(k);
      }
    });
  }

 private:
  // DGRR_KERNEL_TIMES: `f` between two events on the legacy default stream
  // (the stream every launch and copy here is on), read back in batches;
  // `name` is read after `f` ran.
  struct Pending {
    const char* name;
    cudaEvent_t start, stop;
    uint64_t bytes;
  };
  template <typename F>
  void Timed(const char* const& name, uint64_t bytes, F&& f) {
    if (!times_) {
      f();
      return;
    }
    const cudaEvent_t start = Event(), stop = Event();
    Check(cudaEventRecord(start, 0), "cudaEventRecord");
    f();
    Check(cudaEventRecord(stop, 0), "cudaEventRecord");
    pending_.push_back(Pending{name, start, stop, bytes});
    if (pending_.size() >= kKernelTimesBatch) Drain();
  }
  cudaEvent_t Event() {
    if (!free_events_.empty()) {
      const cudaEvent_t e = free_events_.back();
      free_events_.pop_back();
      return e;
    }
    cudaEvent_t e = nullptr;
    Check(cudaEventCreate(&e), "cudaEventCreate");
    return e;
  }
  // Waits for the last pending event, adds every pending interval.
  void Drain() {
    if (pending_.empty()) return;
    Check(cudaEventSynchronize(pending_.back().stop), "cudaEventSynchronize");
    AddPending(/*checked=*/true);
  }
  // Adds every pending interval (the last event has passed) and frees its
  // events for reuse; `checked`: a failed read aborts, as every CUDA call
  // here does, else the interval is left out.
  void AddPending(bool checked) {
    for (const Pending& p : pending_) {
      float ms = 0;
      const cudaError_t err = cudaEventElapsedTime(&ms, p.start, p.stop);
      if (checked) Check(err, "cudaEventElapsedTime");
      if (err == cudaSuccess) times_->Add(p.name, static_cast<double>(ms) / 1e3, p.bytes);
      free_events_.push_back(p.start);
      free_events_.push_back(p.stop);
    }
    pending_.clear();
  }

  std::vector<Pending> pending_;
  std::vector<cudaEvent_t> free_events_;
  int ordinal_ = 0;
  // The product on cuBLAS: one strided-batched SGEMM per second-batch index
  // (the first batch dimension is cuBLAS's batch), beta 1 when the kernel
  // accumulates, then the bias. False (nothing done) when an operand has no
  // unit stride or the output is not row-major: the exact kernel runs it.
  bool GemmOnCublas(const kernels::GemmKernel& k) {
    if (k.M <= 0 || k.N <= 0 || k.nb1 == 0 || k.nb2 == 0) return true;
    if (k.c.cs != 1) return false;
    CublasOperand a, b;
    // B^T (N x K): B(k, n) at k*rs + n is column-major N x K (ld rs); at
    // k + n*cs, the transpose of column-major K x N (ld cs).
    if (!Describe(k.b.rs, k.b.cs, k.N, k.K, &b)) return false;
    // A^T (K x M): A(m, k) at m*rs + k is column-major K x M (ld rs); at
    // m + k*cs, the transpose of column-major M x K (ld cs).
    if (!Describe(k.a.rs, k.a.cs, k.K, k.M, &a)) return false;
    if (k.c.rs < k.N) return false;
    if (k.K <= 0) return false;  // the exact kernel writes the zeros (or keeps c) and the bias
    const float one = 1.0f, zero = 0.0f;
    for (size_t b2 = 0; b2 < k.nb2; ++b2) {
      CheckCublas(cublas_->SgemmStridedBatched(
          b.op == CUBLAS_OP_T, a.op == CUBLAS_OP_T, k.N, k.M, k.K, &one, k.b.p + b2 * k.b.bs2, b.ld,
          static_cast<long long>(k.b.bs1), k.a.p + b2 * k.a.bs2, a.ld, static_cast<long long>(k.a.bs1),
          k.accumulate ? &one : &zero, k.c.p + b2 * k.c.bs2, static_cast<int>(k.c.rs),
          static_cast<long long>(k.c.bs1), static_cast<int>(k.nb1)));
    }
    if (k.bias != nullptr) {
      const size_t threads = k.nb1 * k.nb2 * static_cast<size_t>(k.M) * k.N;
      const unsigned block = kernels::kBlockThreads;
      AddBias<<<static_cast<unsigned>((threads + block - 1) / block), block>>>(k.c, k.bias, k.M, k.N, k.nb1,
                                                                                 k.nb2);
      Check(cudaGetLastError(), "bias kernel launch");
    }
    return true;
  }

  std::optional<CublasHandle> cublas_;
};

}  // namespace

StatusOr<std::unique_ptr<Launcher>> MakeCudaLauncher(GemmBackend gemm) {
  int count = 0;
  const cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess) {
    return Status::FailedPrecondition(std::string("--device cuda: no usable CUDA device (") +
                                      cudaGetErrorString(err) + ")");
  }
  if (count == 0) return Status::FailedPrecondition("--device cuda: no CUDA device");
  std::optional<CublasHandle> cublas;
  if (gemm == GemmBackend::kCublas) {
    StatusOr<CublasHandle> handle = CublasHandle::Create();
    if (!handle.ok()) {
      return Status::FailedPrecondition("--gemm cublas: " + std::string(handle.status().message()));
    }
    cublas.emplace(std::move(*handle));
  }
  return std::unique_ptr<Launcher>(new CudaLauncher(std::move(cublas)));
}

}  // namespace dgrr::model
