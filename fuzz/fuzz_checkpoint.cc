// libFuzzer target: bytes as a checkpoint file (docs/checkpoint-format.md).
//
// Built twice: fuzz_checkpoint_header takes the bytes as they come (the header
// check and the whole-file hash refuse nearly every mutation, which is what
// that target tests); fuzz_checkpoint_hdf5 (DGRR_FUZZ_RESTAMP) first stamps a
// valid header over them (fuzz/restamp.h), so libhdf5 and dgrr's checks of the
// HDF5 contents see every mutation.
#include <hdf5.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "checkpoint/checkpoint_file.h"
#include "fuzz/restamp.h"
#include "fuzz/scratch.h"

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  // libhdf5 prints its error stack on every failure; the Status says enough.
  H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string bytes(dgrr::fuzz::AsView(data, size));
#ifdef DGRR_FUZZ_RESTAMP
  if (!dgrr::fuzz::RestampCheckpoint(bytes)) return -1;  // too short: keep out of the corpus
#endif
  const std::string path = dgrr::fuzz::WriteScratchFile("step-00000001.h5", bytes);
  (void)dgrr::checkpoint::ReadCheckpointHeader(path);
  auto ckpt = dgrr::checkpoint::ReadCheckpoint(path);
  if (ckpt.ok()) {
    for (size_t r = 0; r < ckpt->ranks.size(); ++r) {
      for (const auto& e : ckpt->replicated) (void)ckpt->Find(static_cast<int>(r), e.name);
    }
  }
  // Deferred, as a session's restore reads it: the bytes go straight into
  // buffers of the sizes the metadata gives (RestoreRank reads each dataset
  // again from the file).
  auto deferred = dgrr::checkpoint::ReadCheckpoint(path, dgrr::checkpoint::EntryData::kDeferred);
  if (deferred.ok() && !deferred->ranks.empty()) {
    std::vector<std::vector<uint8_t>> buffers;  // reserved: registered pointers stay valid
    buffers.reserve(deferred->replicated.size() + deferred->ranks[0].entries.size());
    dgrr::StateRegistry registry;
    auto add = [&](const dgrr::checkpoint::SavedEntry& e) {
      if (e.size() > (uint64_t{64} << 20)) return false;
      buffers.emplace_back(e.size());
      return registry
          .Register({e.name, buffers.back().data(), e.size(), e.dtype, e.shape, e.role,
                     dgrr::RestorePolicy::kCheckpoint, e.replicated})
          .ok();
    };
    bool fits = true;
    for (const auto& e : deferred->replicated) fits = fits && add(e);
    for (const auto& e : deferred->ranks[0].entries) fits = fits && add(e);
    if (fits) (void)dgrr::checkpoint::RestoreRank(*deferred, 0, registry);
  }
  // The same bytes as one shard read alone (dgrr diff-tensor on a shard).
  const std::string shard = dgrr::fuzz::WriteScratchFile("step-00000001.rank-0.h5", bytes);
  (void)dgrr::checkpoint::ReadCheckpointShard(shard);
  return 0;
}
