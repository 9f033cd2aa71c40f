// dgrr: entry point. Everything lives in the dgrr_cli object library so tests
// can run the same command lines in-process (cli/command.h: RunDgrr).
#include <string>
#include <vector>

#include "cli/command.h"

int main(int argc, char** argv) {
  return dgrr::cli::RunDgrr(std::vector<std::string>(argv + 1, argv + argc));
}
