// Where a device launcher's time goes, per kernel type: the breakdown a GPU
// session needs before it can tell which kernel to make faster.
//
// With DGRR_KERNEL_TIMES=DIR in the environment, every launcher that
// MakeLauncher makes (`--device cuda` and `cuda-sim`) adds up, per kernel
// type, its launches and their time, and the bytes and time of its copies to
// and from the device, and when the launcher is destroyed writes one file
// DIR/kernel-times-PID-N.json (atomically: write, fsync, rename). On cuda the
// times are CUDA events recorded before and after each launch or copy on the
// launcher's stream (the device's own time, in stream order; reading them
// waits for the device once every kKernelTimesBatch launches, so a timed run
// is a little slower than an untimed one); on cuda-sim they are the host's
// steady clock around each emulated grid. The format, `dgrr.kernel_times/1`,
// is in docs/gpu.md ("Where a device step's time goes");
// scripts/kernel-times.py sums the files into one table.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"

namespace dgrr::model {

inline constexpr const char* kKernelTimesVariable = "DGRR_KERNEL_TIMES";
inline constexpr const char* kKernelTimesSchema = "dgrr.kernel_times/1";
// How many timed launches a CUDA launcher keeps pending before it reads them.
inline constexpr size_t kKernelTimesBatch = 4096;

struct KernelTimeRow {
  std::string name;
  uint64_t calls = 0;
  uint64_t bytes = 0;  // copies only
  double seconds = 0;
};

class KernelTimes {
 public:
  // `device` and `clock` are written as they are ("cuda", "cuda events").
  KernelTimes(std::string dir, std::string device, std::string clock);
  // Writes the file (Write) unless it was written or nothing was added; a
  // failure is one line on stderr, since a destructor has nobody to return
  // it to.
  ~KernelTimes();
  KernelTimes(const KernelTimes&) = delete;
  KernelTimes& operator=(const KernelTimes&) = delete;

  // DGRR_KERNEL_TIMES: null when unset or empty. A DIR that is not a
  // directory and cannot be made one is IOError (the CLI's exit 2), with
  // the variable, the path and the reason.
  static StatusOr<std::unique_ptr<KernelTimes>> FromEnvironment(std::string_view device,
                                                                std::string_view clock);

  void Add(std::string_view name, double seconds, uint64_t bytes = 0);
  // The rows so far, the longest first (ties by name).
  std::vector<KernelTimeRow> Rows() const;
  // The `dgrr.kernel_times/1` object of the rows so far, one line.
  std::string ToJson() const;
  // DIR/kernel-times-PID-N.json, N counting this process's files.
  const std::string& path() const { return path_; }
  Status Write();

 private:
  std::string device_, clock_, path_;
  std::vector<KernelTimeRow> rows_;
  double created_ = 0;  // steady clock, seconds
  bool written_ = false;
};

}  // namespace dgrr::model
