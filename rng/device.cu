#include <cuda_runtime.h>

#include <initializer_list>

#include "rng/device_cuda.h"
#include "rng/distributions.h"

namespace dgrr::rng::cuda_detail {
namespace {

struct DeviceOutputs {
  uint32_t* u32;
  float* uniform_float;
  double* uniform_double;
  float* normal_float;
  double* normal_double;
  uint8_t* mask;
};

__global__ void DrawKernel(const PhiloxStream* streams, size_t stream_count, size_t per_stream,
                           uint64_t threshold, DeviceOutputs out) {
  const size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= stream_count) return;
  const size_t at = i * per_stream;
  PhiloxStream s = streams[i];
  s.Fill(out.u32 + at, per_stream);
  s = streams[i];
  FillUniformFloat(s, out.uniform_float + at, per_stream);
  s = streams[i];
  FillUniformDouble(s, out.uniform_double + at, per_stream);
  s = streams[i];
  FillNormalFloat(s, out.normal_float + at, per_stream);
  s = streams[i];
  FillNormalDouble(s, out.normal_double + at, per_stream);
  s = streams[i];
  FillBernoulliMask(s, out.mask + at, per_stream, threshold);
}

std::string CudaError(const char* what, cudaError_t err) {
  return std::string(what) + ": " + cudaGetErrorString(err);
}

// Device buffer freed on scope exit.
template <typename T>
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  ~DeviceBuffer() {
    if (ptr_ != nullptr) cudaFree(ptr_);
  }
  cudaError_t Allocate(size_t count) {
    return cudaMalloc(reinterpret_cast<void**>(&ptr_), count * sizeof(T) + 1);
  }
  T* get() const { return ptr_; }

 private:
  T* ptr_ = nullptr;
};

template <typename T>
cudaError_t CopyBack(std::vector<T>* host, const DeviceBuffer<T>& device, size_t count) {
  host->resize(count);
  return cudaMemcpy(host->data(), device.get(), count * sizeof(T), cudaMemcpyDeviceToHost);
}

}  // namespace

int DeviceCount(std::string* error) {
  int count = 0;
  const cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess) {
    *error = cudaGetErrorString(err);
    return -1;
  }
  return count;
}

std::string Draw(const std::vector<PhiloxStream>& streams, size_t per_stream, uint64_t threshold,
                 DrawSet* out) {
  const size_t total = streams.size() * per_stream;
  DeviceBuffer<PhiloxStream> d_streams;
  DeviceBuffer<uint32_t> d_u32;
  DeviceBuffer<float> d_uniform_float, d_normal_float;
  DeviceBuffer<double> d_uniform_double, d_normal_double;
  DeviceBuffer<uint8_t> d_mask;
  for (cudaError_t err : {d_streams.Allocate(streams.size()), d_u32.Allocate(total),
                          d_uniform_float.Allocate(total), d_normal_float.Allocate(total),
                          d_uniform_double.Allocate(total), d_normal_double.Allocate(total),
                          d_mask.Allocate(total)}) {
    if (err != cudaSuccess) return CudaError("cudaMalloc", err);
  }
  cudaError_t err = cudaMemcpy(d_streams.get(), streams.data(),
                               streams.size() * sizeof(PhiloxStream), cudaMemcpyHostToDevice);
  if (err != cudaSuccess) return CudaError("cudaMemcpy to device", err);
  const DeviceOutputs outputs{d_u32.get(), d_uniform_float.get(), d_uniform_double.get(),
                              d_normal_float.get(), d_normal_double.get(), d_mask.get()};
  constexpr unsigned kThreads = 128;
  const unsigned blocks = static_cast<unsigned>((streams.size() + kThreads - 1) / kThreads);
  if (blocks > 0) {
    DrawKernel<<<blocks, kThreads>>>(d_streams.get(), streams.size(), per_stream, threshold, outputs);
    err = cudaGetLastError();
    if (err != cudaSuccess) return CudaError("kernel launch", err);
  }
  err = cudaDeviceSynchronize();
  if (err != cudaSuccess) return CudaError("kernel", err);
  DrawSet& set = *out;
  for (cudaError_t copy_err :
       {CopyBack(&set.u32, d_u32, total), CopyBack(&set.uniform_float, d_uniform_float, total),
        CopyBack(&set.uniform_double, d_uniform_double, total),
        CopyBack(&set.normal_float, d_normal_float, total),
        CopyBack(&set.normal_double, d_normal_double, total),
        CopyBack(&set.mask, d_mask, total)}) {
    if (copy_err != cudaSuccess) return CudaError("cudaMemcpy to host", copy_err);
  }
  return "";
}

}  // namespace dgrr::rng::cuda_detail
