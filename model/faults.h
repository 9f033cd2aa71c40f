// Fault injection for drills and tests (`dgrr train --inject SPEC`). Each
// kind reproduces a real bug class from the OpGuard and DETrain case studies:
//
//   bitflip:step=S,rank=R,at=NAME[,example=E][,index=I][,bit=B]
//       flip bit B of element I of the tensor at boundary NAME (silent data
//       corruption). NAME is a per-example model boundary (the flip happens
//       right after it is recorded, so the next boundaries show it) or a
//       parameter tensor (flipped on rank R right after the update).
//   race:step=S,at=PARAM
//       reduce PARAM's gradient over the examples in completion order by
//       racing worker threads (a racy kernel), instead of the fixed tree.
//   shared-rng:step=S[,rank=R]
//       draw dropout masks from one generator shared by the worker threads,
//       in scheduling order (DETrain's motivating bug).
//   reduce-order:step=S
//       all-reduce the gradients with a different but valid order (left to
//       right), like a changed NCCL topology.
//   skip-restore:NAME
//       forget to restore state NAME on resume.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"

namespace dgrr::model {

enum class FaultKind { kBitflip, kRace, kSharedRng, kReduceOrder, kSkipRestore };
const char* FaultKindName(FaultKind kind);

struct FaultSpec {
  FaultKind kind = FaultKind::kBitflip;
  std::string text;          // as given, for the config and EVENT payloads
  uint64_t step = 0;
  int rank = 0;
  std::string at;            // boundary / parameter / state name
  std::optional<uint64_t> example;  // bitflip: global example index (default: rank's first)
  uint64_t index = 0;        // bitflip: element index
  int bit = 20;              // bitflip: bit within the 32-bit float (a mantissa bit)
};

// Parses one --inject argument; InvalidArgument naming the problem.
StatusOr<FaultSpec> ParseFaultSpec(std::string_view text);

}  // namespace dgrr::model
