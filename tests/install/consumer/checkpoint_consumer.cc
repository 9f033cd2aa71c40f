// A program outside the dgrr tree that checkpoints: registers its state,
// writes a checkpoint, reads it back and restores it. The install test builds
// it against the installed package (CMake and plain pkg-config) to prove that
// what a checkpointing program needs (HDF5, zstd, xxhash, threads) comes along.
//
// usage: checkpoint_consumer OUT.h5
#include <dgrr/dgrr.h>

#include <cstdio>
#include <vector>

#include "checkpoint/checkpoint_file.h"

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: checkpoint_consumer OUT.h5\n");
    return 1;
  }
  std::vector<float> weights(4096);
  for (size_t i = 0; i < weights.size(); ++i) weights[i] = static_cast<float>(i % 64) * 0.25f;
  dgrr::StateRegistry state;
  dgrr::Status s = state.Register({"weights", weights.data(), weights.size() * sizeof(float),
                                   dgrr::DType::kF32, {4096}, dgrr::StateRole::kParameter,
                                   dgrr::RestorePolicy::kCheckpoint, true});
  dgrr::checkpoint::CheckpointMeta meta;
  meta.step = 3;
  meta.run_id_hex = "0123456789abcdef0123456789abcdef";
  meta.plan_json = "{}";
  if (s.ok()) s = dgrr::checkpoint::WriteCheckpoint(argv[1], meta, {{0, &state, 0}});
  if (!s.ok()) {
    std::fprintf(stderr, "checkpoint_consumer: %s\n", s.ToString().c_str());
    return 2;
  }
  auto loaded = dgrr::checkpoint::ReadCheckpoint(argv[1]);
  if (!loaded.ok()) {
    std::fprintf(stderr, "checkpoint_consumer: %s\n", loaded.status().ToString().c_str());
    return 3;
  }
  const std::vector<float> written = weights;
  weights.assign(weights.size(), 0.0f);
  s = dgrr::checkpoint::RestoreRank(*loaded, 0, state);
  if (!s.ok() || weights != written) {
    std::fprintf(stderr, "checkpoint_consumer: restore did not give back the state: %s\n",
                 s.ToString().c_str());
    return 4;
  }
  std::printf("checkpoint_consumer: wrote, read and restored %s (step %llu)\n", argv[1],
              static_cast<unsigned long long>(loaded->meta.step));
  return 0;
}
