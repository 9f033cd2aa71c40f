// Linked into every test executable: command lines the tests run in-process
// (tests/cli/run_captured.h) record `dgrr train` runs whose launch record must
// name the real dgrr binary, not the test (model/launch.h). The build's own
// binary is the default; a DGRR_EXECUTABLE already set wins.
#include <cstdlib>

namespace {

struct SetDgrrExecutable {
  SetDgrrExecutable() { ::setenv("DGRR_EXECUTABLE", DGRR_EXECUTABLE_FOR_TESTS, /*overwrite=*/0); }
} set_dgrr_executable;

}  // namespace
