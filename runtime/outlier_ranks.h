// OutlierRanks: which ranks hold a value the others do not, for the per-step
// SDC check (Session: every rank's parameter fingerprint after the step,
// gathered over the rank's communicator). The majority is taken as right;
// without a strict majority, rank 0 is the reference. This file only
// compares fingerprints: gathering them is the session's.
#pragma once

#include <vector>

#include "fingerprint/fingerprint.h"

namespace dgrr {

// The ranks whose fingerprint differs from the majority value (all ranks that
// disagree with rank 0 when there is no strict majority), ascending.
std::vector<int> OutlierRanks(const std::vector<Fingerprint>& fingerprints);

}  // namespace dgrr
