// libFuzzer target: arbitrary bytes as a trace file (docs/trace-format.md).
#include <cstddef>
#include <cstdint>

#include "fuzz/scratch.h"
#include "fuzz/trace_source.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  (void)dgrr::fuzz::ExerciseTraceReader(dgrr::fuzz::AsView(data, size));
  return 0;
}
