// libFuzzer target: bytes as a run's config.json, read the way `train
// --resume`, `plan`, `replay` and `rollback` read it (model::TrainOptionsFromRun),
// and as the fast-forward plan JSON a checkpoint carries (PlansFromJson).
#include <cstddef>
#include <cstdint>
#include <string>

#include "checkpoint/fast_forward.h"
#include "fuzz/scratch.h"
#include "model/trainer.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text = dgrr::fuzz::AsView(data, size);
  dgrr::fuzz::WriteScratchFile("config.json", text);
  (void)dgrr::model::TrainOptionsFromRun(dgrr::fuzz::ScratchDir());
  (void)dgrr::checkpoint::PlansFromJson(text, "plan.json");
  return 0;
}
