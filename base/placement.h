// Placement: where a buffer lives, host memory or a device's memory on one of
// its streams. Shared by tensors (fingerprint/tensor.h: what is recorded) and
// communicators (runtime/communicator.h: what is moved), so that a tensor's
// placement passes through both without translation.
#pragma once

#include <cstdint>
#include <string>

namespace dgrr {

// Host memory unless said otherwise; `stream` is the device stream
// (cudaStream_t) that orders the work on a device buffer: its fingerprint, its
// collectives. nullptr is the device's legacy default stream.
struct Placement {
  enum class Kind : uint8_t { kHost, kCuda };
  Kind kind = Kind::kHost;
  int device = -1;
  void* stream = nullptr;

  static Placement Host() { return {}; }
  static Placement Cuda(int device, void* stream) { return {Kind::kCuda, device, stream}; }
  bool host() const { return kind == Kind::kHost; }
  // "host", "cuda:0".
  std::string ToString() const {
    return host() ? std::string("host") : "cuda:" + std::to_string(device);
  }
};

}  // namespace dgrr
