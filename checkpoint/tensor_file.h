// dgrr tensor dumps (docs/tensor-dump.md, "dgrr tensor dump v1"): the full
// bytes of one boundary at one step on one rank, as recorded, in a small HDF5
// file, so a divergence seen in fingerprints can be confirmed element by
// element (`dgrr replay --dump`, `dgrr diff-tensor`).
//
// One dataset per recorded occurrence of the boundary (per-example boundaries:
// one per example of the rank's shard; rank-level ones: one), named by its
// example range so two runs' dumps pair up. Each carries the fingerprint the
// trace recorded for it and the XXH3-64 of its bytes, verified on read.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "base/dtype.h"
#include "base/status.h"
#include "fingerprint/fingerprint.h"

namespace dgrr::checkpoint {

inline constexpr uint64_t kTensorDumpFormatVersion = 1;
inline constexpr const char* kTensorDumpFormatName = "dgrr tensor dump";

// One recorded occurrence of the boundary.
struct DumpedTensor {
  std::string name;            // dataset name: TensorDatasetName(example_first, example_count)
  DType dtype = DType::kF32;
  std::vector<int64_t> shape;  // as recorded; empty: a scalar
  uint64_t example_first = 0;
  uint32_t example_count = 0;
  std::string phase;           // trace phase name: data, forward, backward, collective, optimizer
  Fingerprint recorded;        // the fingerprint in the trace record
  std::vector<uint8_t> data;   // row-major, exactly the fingerprinted bytes
};

struct TensorDump {
  std::string path;            // set by ReadTensorDump
  std::string dgrr_version;    // of the writer (set by ReadTensorDump)
  std::string run_dir;         // the run the boundary was recorded in
  std::string boundary;
  uint64_t step = 0;
  int rank = 0;
  std::vector<DumpedTensor> tensors;  // in name order after ReadTensorDump
  // The tensor called `name`; null when absent.
  const DumpedTensor* Find(const std::string& name) const;
};

// "ex00000012_n1": the dataset name of an occurrence (example index padded to
// 8 digits so that name order is example order).
std::string TensorDatasetName(uint64_t example_first, uint32_t example_count);

// "<dir>/<boundary>@<step>.rank<rank>.h5" ('/' in the boundary name becomes '_').
std::string TensorDumpPath(const std::string& dir, const std::string& boundary, uint64_t step,
                           int rank);

// Writes atomically (temporary in the same directory, fsync, rename, fsync of
// the directory): on any failure no file is left at `path` or beside it.
// InvalidArgument when a tensor's bytes do not match its dtype and shape, or
// two tensors share a name.
Status WriteTensorDump(const std::string& path, const TensorDump& dump, int zstd_level = 3);

// Reads and verifies a dump. A missing file is NotFound; anything damaged or
// not understood is Corruption naming the file and the dataset.
StatusOr<TensorDump> ReadTensorDump(const std::string& path);

}  // namespace dgrr::checkpoint
