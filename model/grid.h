// Where the reference model's kernels run, and the launchers that run them.
//
// A Launcher runs one launch of a model/kernels.h kernel over its whole grid
// (ceil(threads / kBlockThreads) blocks of kBlockThreads threads) and owns
// the memory the kernels see:
//   - GridEmulator (`--device cuda-sim`): every block and every thread of the
//     grid, one after another on the calling thread, over host memory. No
//     kernel uses shared memory or barriers, so running threads in sequence
//     is a valid schedule of the launch, and since no thread reads what
//     another writes, every schedule gives the same bits.
//   - the CUDA launcher (`--device cuda`, model/kernels_cuda.cu, built where
//     nvcc is): a __global__ entry per kernel type over device memory.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <string_view>

#include "base/status.h"
#include "model/kernel_times.h"
#include "model/kernels.h"

namespace dgrr::model {

enum class Device { kCpu = 0, kCudaSim = 1, kCuda = 2 };
const char* DeviceName(Device device);  // "cpu", "cuda-sim", "cuda"
// "cpu", "cuda-sim" or "cuda"; anything else is InvalidArgument.
StatusOr<Device> ParseDevice(std::string_view name);

class Launcher {
 public:
  virtual ~Launcher() = default;
  virtual Device device() const = 0;
  // Whether kernel memory is host memory (the emulator): then a kernel
  // buffer may be read and written directly by host code.
  virtual bool host_memory() const = 0;
  virtual void* Alloc(size_t bytes) = 0;  // zeroed; aborts when out of memory
  virtual void Free(void* p) = 0;
  virtual void CopyToDevice(void* dst, const void* src, size_t bytes) = 0;
  virtual void CopyToHost(void* dst, const void* src, size_t bytes) = 0;
  // Waits for every launch so far (a no-op for the emulator).
  virtual void Synchronize() = 0;
  // The CUDA device the launcher's memory and launches are on (the current
  // one when it was made); 0 for the emulator.
  virtual int device_ordinal() const { return 0; }
#define DGRR_DECLARE_LAUNCH(K) virtual void Launch(const kernels::K& k) = 0;
  DGRR_MODEL_KERNELS(DGRR_DECLARE_LAUNCH)
#undef DGRR_DECLARE_LAUNCH

  // DGRR_KERNEL_TIMES (model/kernel_times.h): what this launcher's launches
  // and copies took, per kernel type; null when not asked for. MakeLauncher
  // sets it before the first launch; the file is written when the launcher
  // goes (a derived launcher first adds what it still has pending).
  KernelTimes* kernel_times() const { return times_.get(); }
  void set_kernel_times(std::unique_ptr<KernelTimes> times) { times_ = std::move(times); }

 protected:
  std::unique_ptr<KernelTimes> times_;
};

// Runs the grid of `k` on the calling thread: for each block, for each of
// its threads, the kernel's body at those coordinates.
template <typename K>
void EmulateGrid(const K& k) {
  using kernels::ThreadCoords;
  const size_t threads = k.threads();
  if (threads == 0) return;
  const unsigned block = kernels::kBlockThreads;
  const unsigned grid = static_cast<unsigned>((threads + block - 1) / block);
  ThreadCoords c;
  c.block_dim.x = block;
  c.grid_dim.x = grid;
  for (unsigned b = 0; b < grid; ++b) {
    c.block_idx.x = b;
    for (unsigned t = 0; t < block; ++t) {
      c.thread_idx.x = t;
      kernels::RunThread(k, c);
    }
  }
}

class GridEmulator final : public Launcher {
 public:
  Device device() const override { return Device::kCudaSim; }
  bool host_memory() const override { return true; }
  void* Alloc(size_t bytes) override;
  void Free(void* p) override;
  void CopyToDevice(void* dst, const void* src, size_t bytes) override;
  void CopyToHost(void* dst, const void* src, size_t bytes) override;
  void Synchronize() override {}
#define DGRR_DECLARE_LAUNCH(K) void Launch(const kernels::K& k) override;
  DGRR_MODEL_KERNELS(DGRR_DECLARE_LAUNCH)
#undef DGRR_DECLARE_LAUNCH
};

// How a launcher runs the plain products (kernels::GemmKernel).
//   kExact   the fma-chain kernel: bitwise the CPU's, on every device.
//   kCublas  cuBLAS (cuda only) on the runtime's pinned deterministic handle
//            (runtime/cublas_handle.h: no TF32, no atomics): the same bits
//            run after run on one GPU and library version, not the CPU's.
//            Products whose operands cuBLAS cannot describe (neither stride
//            1) and the causal products stay on the exact kernels.
enum class GemmBackend { kExact, kCublas };

// The launcher of `device` (cuda-sim or cuda). For cuda: Unavailable with
// one line when this build has no CUDA or no device is usable. kCublas on
// another device than cuda: InvalidArgument.
StatusOr<std::unique_ptr<Launcher>> MakeLauncher(Device device, GemmBackend gemm = GemmBackend::kExact);

// The clock each launcher's kernel times are read with (kernel_times.h).
inline constexpr const char* kEmulatorClock = "host steady clock";
inline constexpr const char* kCudaClock = "cuda events";

// Whether this build has the CUDA launcher.
bool CudaLauncherBuilt();

}  // namespace dgrr::model
