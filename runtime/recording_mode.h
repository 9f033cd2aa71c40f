// Recording modes (OpGuard §6.1, §6.4): how much of a run is fingerprinted.
//
//   full     every boundary: forward, backward, collectives, optimizer, data.
//   trusted  full minus the allowlist of high-confidence primitives below.
//   sdc      only collective boundaries, plus the per-step fingerprint of every
//            rank's parameters (checked across ranks at each step end).
//   off      nothing recorded; the arithmetic is exactly the same.
#pragma once

#include <optional>
#include <string_view>

#include "trace_format/record.h"

namespace dgrr {

enum class RecordMode { kFull, kTrusted, kSdc, kOff };

std::string_view RecordModeName(RecordMode mode);
std::optional<RecordMode> ParseRecordMode(std::string_view name);

// What kind of operator produced a boundary's tensor. Only `trusted` mode
// looks at it; it is not stored in the trace.
enum class OpKind : unsigned char {
  kOther = 0,
  kMatmul,       // a plain matrix product (no fused epilogue)
  kElementwise,  // bias add, activation, residual add, dropout apply, scaling
  kNorm,         // layernorm and friends (reductions inside)
  kAttention,    // softmax / attention core (reductions inside)
  kEmbedding,
  kLoss,
  kCollective,   // cross-rank reduction
  kOptimizer,
  kData,
};

// The trusted allowlist: operators whose every element is a fixed function
// of its guarded inputs with no reduction across threads (matmuls computed in
// a fixed k order, elementwise maps). Their inputs and consumers stay guarded,
// so a corruption in them still shows at the next guarded boundary.
bool IsTrustedPrimitive(OpKind kind);

// Does `mode` record a boundary of this phase and kind?
bool ShouldRecordBoundary(RecordMode mode, trace::Phase phase, OpKind kind);

}  // namespace dgrr
