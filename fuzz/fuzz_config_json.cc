// libFuzzer target: bytes as a run's config.json, read the way `train
// --resume`, `plan`, `replay` and `rollback` read it (model::TrainOptionsFromRun over
// model/run_config.h's codec),
// and as the fast-forward plan JSON a checkpoint carries (PlansFromJson), a
// control file, a control result and a launch record.
#include <cstddef>
#include <cstdint>
#include <string>

#include "checkpoint/fast_forward.h"
#include "fuzz/scratch.h"
#include "model/trainer.h"
#include "runtime/control_file.h"
#include "runtime/launch_record.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text = dgrr::fuzz::AsView(data, size);
  dgrr::fuzz::WriteScratchFile("config.json", text);
  (void)dgrr::model::TrainOptionsFromRun(dgrr::fuzz::ScratchDir());
  (void)dgrr::checkpoint::PlansFromJson(text, "plan.json");
  // The re-execution contract's files: what a re-launched program and dgrr
  // read from each other (docs/control-file.md, docs/launch-record.md).
  const std::string control = dgrr::fuzz::WriteScratchFile("control.json", text);
  (void)dgrr::ReadControlFile(control);
  (void)dgrr::ReadControlResult(control);
  dgrr::fuzz::WriteScratchFile("launch.json", text);
  (void)dgrr::ReadLaunchRecord(dgrr::fuzz::ScratchDir());
  return 0;
}
