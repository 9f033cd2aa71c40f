// A program outside the dgrr tree that compares two runs through the
// installed API (replay/run_comparison.h): prints the report `dgrr compare`
// prints and one line of its own, and exits as `dgrr compare` would (0 the
// runs agree, 4 they differ; 2 when they cannot be read).
//
// usage: compare_consumer RUN_A RUN_B
#include <dgrr/dgrr.h>

#include <cstdio>

#include "replay/run_comparison.h"

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: compare_consumer RUN_A RUN_B\n");
    return 1;
  }
  auto c = dgrr::CompareRunDirectories(argv[1], argv[2]);
  if (!c.ok()) {
    std::fprintf(stderr, "compare_consumer: %s\n", c.status().ToString().c_str());
    return 2;
  }
  std::fputs(c->text.c_str(), stdout);
  std::printf("compare_consumer: %s; %llu steps certified\n", c->differs ? "the runs differ" : "the runs agree",
              static_cast<unsigned long long>(c->certified_steps));
  if (c->first_b) {
    std::printf("compare_consumer: first difference at step %llu rank %u: %s\n",
                static_cast<unsigned long long>(c->first_b->step), c->first_b->rank, c->first_b->name.c_str());
  }
  return c->exit_code();
}
