// A gate that holds a CUDA stream at a host function, for tests that show a
// call returns without waiting for the stream. Include only where CUDA is
// built (the file includes <cuda_runtime.h>).
#pragma once

#include <cuda_runtime.h>

#include <atomic>
#include <chrono>
#include <thread>

namespace dgrr::test_support {

// cudaLaunchHostFunc(stream, &StreamGate::Hold, &gate) holds the stream
// until the test sets `open`, or 60 s pass, so that code that waits for the
// stream cannot hang the test: it then finds the gate let go by itself
// (`let_go`) and fails. The 60 s are a deadlock guard, not a speed limit:
// code that never waits returns while the gate is still shut, however slow
// the machine. The gate must outlive the stream's pass through Hold.
struct StreamGate {
  std::atomic<bool> open{false};
  std::atomic<bool> let_go{false};
  static void CUDART_CB Hold(void* self) {
    auto* gate = static_cast<StreamGate*>(self);
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    while (!gate->open.load()) {
      if (std::chrono::steady_clock::now() >= until) {
        gate->let_go.store(true);
        return;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  }
};

}  // namespace dgrr::test_support
