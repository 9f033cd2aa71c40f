// The order in which training sees examples: global example g (counting
// from 0 over the whole run) is position g % N of epoch g / N's Philox
// permutation of the N examples. A pure function of (seed, g), so resuming at
// any step computes its batch directly: fast-forwarding the data pipeline
// costs one permutation of one epoch, however many steps came before.
#pragma once

#include <cstdint>
#include <vector>

#include "base/status.h"
#include "rng/rng_streams.h"

namespace dgrr::model {

class DataOrder {
 public:
  DataOrder(const rng::RngStreams& rng, uint64_t num_examples)
      : rng_(rng), num_examples_(num_examples) {}

  // The dataset index of global example g. Keeps the current epoch's
  // permutation, so consecutive calls cost O(1) each and a new epoch O(N).
  StatusOr<uint64_t> IndexOf(uint64_t g);

 private:
  rng::RngStreams rng_;
  uint64_t num_examples_;
  uint64_t epoch_ = ~0ull;
  std::vector<uint32_t> permutation_;
};

}  // namespace dgrr::model
