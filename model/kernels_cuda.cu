// The CUDA launcher of the model's kernels (`--device cuda`): one __global__
// entry per kernel type, whose threads call the same DGRR_HD body
// (model/kernels.h) the grid emulator runs on the CPU, over device memory.
// Built with --fmad=false (the top-level CMakeLists.txt): the only fused
// multiply-adds are the source's Fma calls (__fmaf_rn).
#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>

#include "model/grid.h"

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

class CudaLauncher final : public Launcher {
 public:
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
    if (bytes) Check(cudaMemcpy(dst, src, bytes, cudaMemcpyHostToDevice), "cudaMemcpy to device");
  }
  void CopyToHost(void* dst, const void* src, size_t bytes) override {
    if (bytes) Check(cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToHost), "cudaMemcpy to host");
  }
  void Synchronize() override { Check(cudaDeviceSynchronize(), "cudaDeviceSynchronize"); }
#define DGRR_DEFINE_LAUNCH(K) \
  void Launch(const kernels::K& k) override { LaunchOnDevice(k); }
  DGRR_MODEL_KERNELS(DGRR_DEFINE_LAUNCH)
#undef DGRR_DEFINE_LAUNCH
};

}  // namespace

StatusOr<std::unique_ptr<Launcher>> MakeCudaLauncher() {
  int count = 0;
  const cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess) {
    return Status::FailedPrecondition(std::string("--device cuda: no usable CUDA device (") +
                                      cudaGetErrorString(err) + ")");
  }
  if (count == 0) return Status::FailedPrecondition("--device cuda: no CUDA device");
  return std::unique_ptr<Launcher>(new CudaLauncher());
}

}  // namespace dgrr::model
