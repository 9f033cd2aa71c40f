// Fault injection for drills and tests (`dgrr train --inject SPEC`). Each
// kind reproduces a real bug class from the OpGuard and DETrain case studies:
//
//   bitflip:step=S,rank=R,at=NAME[,example=E][,index=I][,bit=B]
//       flip bit B of element I of the tensor at boundary NAME on rank R at
//       step S (silent data corruption). NAME is any boundary a run of the
//       model records (FaultTargets below; `dgrr inspect TRACE` lists them),
//       in any part of the step: the input tokens, a per-example forward
//       output or backward activation gradient (of example E, default the
//       rank's first), the loss, rank R's copy of an all-reduced gradient,
//       the clipped gradient AdamW reads, the updated parameter, or AdamW's
//       moments. The tensor is flipped before it is fingerprinted and before
//       anything reads it, so the record shows the corruption and it flows on
//       as a real fault would.
//   multibit:step=S,rank=R,at=NAME[,example=E][,index=I][,bits=B1+B2+...|,count=K][,elements=N]
//       flip several bits: the bits listed (the same ones in each element),
//       or K distinct bits drawn per element (default K=2), in each of the N
//       consecutive elements I..I+N-1 (default N=1): k bits in one element,
//       or bits across elements.
//   stuck-byte:step=S,rank=R,at=NAME[,example=E][,index=I][,byte=K][,value=V]
//       byte K of element I (0 = least significant; default the top byte,
//       sign and exponent of a float) reads V (0..255, default 255).
//   random:step=S,rank=R,at=NAME[,example=E][,index=I]
//       element I becomes a random value (any bit pattern, never the old one).
//   nan:... / inf:...[,sign=-]
//       element I becomes a quiet NaN / +Inf (-Inf with sign=-); floats only.
//       These five take NAME, example and index as bitflip does, at every
//       boundary and phase. Their randomness is a pure function of the run's
//       seed, the step, rank, example and element (Philox, rng/), so a
//       replay re-fires the same fault.
//   race:step=S,at=PARAM
//       reduce PARAM's gradient over the examples in completion order by
//       racing worker threads (a racy kernel), instead of the fixed tree.
//       PARAM may also be named by its gradient or its all-reduce boundary.
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
#include <utility>
#include <vector>

#include "base/status.h"
#include "model/config.h"

namespace dgrr::model {

enum class FaultKind {
  kBitflip,
  kRace,
  kSharedRng,
  kReduceOrder,
  kSkipRestore,
  kMultibit,
  kStuckByte,
  kRandom,
  kNan,
  kInf,
};
const char* FaultKindName(FaultKind kind);
// The kinds that corrupt elements of one recorded tensor: bitflip, multibit,
// stuck-byte, random, nan, inf. At most one of them per step and rank.
bool CorruptsTensor(FaultKind kind);

struct FaultSpec {
  FaultKind kind = FaultKind::kBitflip;
  std::string text;          // as given, for the config and EVENT payloads
  uint64_t step = 0;
  int rank = 0;
  std::string at;            // boundary / parameter / state name
  std::optional<uint64_t> example;  // bitflip: global example index (default: rank's first)
  uint64_t index = 0;        // bitflip: element index
  std::optional<int> bit;    // bitflip: bit within the element (default: FlipTarget::default_bit)
  std::vector<int> bits;     // multibit: bits=B1+B2+... flipped in each element
  std::optional<int> count;  // multibit: count=K distinct bits drawn per element (default 2 without bits=)
  uint64_t elements = 1;     // multibit: elements=N, the span index..index+N-1
  std::optional<int> byte;   // stuck-byte: byte within the element (default: its top byte)
  uint8_t value = 0xff;      // stuck-byte: the value the byte is stuck at
  bool negative = false;     // inf: sign=-
};

// The first tensor fault (CorruptsTensor) of `faults` due at `step` on `rank`.
const FaultSpec* TensorFaultAt(const std::vector<FaultSpec>& faults, uint64_t step, int rank);

// Parses one --inject argument; InvalidArgument naming the problem.
StatusOr<FaultSpec> ParseFaultSpec(std::string_view text);

// Where in a training step a recorded boundary's tensor is produced, which
// decides where a bitflip of it must happen.
enum class FlipSite : uint8_t {
  kTokens,      // data.tokens: one example's input bytes, before its forward pass
  kExample,     // a per-example forward output (the loss included) or backward activation gradient
  kCollective,  // allreduce.<grad>: this rank's copy of the all-reduced gradient
  kGradient,    // <param>.grad: the clipped gradient AdamW reads
  kParameter,   // <param>: the parameter AdamW has just written
  kMomentM,     // adamw.m.<param>: AdamW's first moment, state read by the next step
  kMomentV,     // adamw.v.<param>: its second moment
};
const char* FlipSiteName(FlipSite site);

// One recorded boundary as a bitflip target.
struct FlipTarget {
  std::string name;
  FlipSite site = FlipSite::kExample;
  uint64_t elements = 0;      // in one occurrence (one example, or the whole tensor per batch)
  int element_bits = 32;      // 8 for the token bytes, 32 for floats
  int default_bit = 20;       // a float mantissa bit; the lowest bit of a byte
  size_t tensor = 0;          // per-batch sites: index in ParameterLayout::tensors()
  bool per_example() const { return site == FlipSite::kTokens || site == FlipSite::kExample; }
};

// Every boundary a run of one model records, in the order one step records
// them (the names `dgrr inspect` lists): the tokens, the per-example
// boundaries, the all-reduced gradients, then per parameter tensor its
// gradient, the updated tensor and the two moments.
class FaultTargets {
 public:
  // `per_example`: the model's per-example boundaries in order, with the
  // element count of each (learned by running one example).
  FaultTargets(std::string tokens_name, uint64_t tokens_per_example,
               const std::vector<std::pair<std::string, uint64_t>>& per_example,
               const ParameterLayout& layout);

  const FlipTarget* Find(std::string_view name) const;
  const std::vector<FlipTarget>& all() const { return targets_; }
  std::vector<std::string> Names() const;
  const ParameterLayout& layout() const { return layout_; }
  // The parameter whose gradient reduction `name` denotes: the parameter
  // itself, its gradient ("block0.mlp.fc.dw") or its all-reduce boundary.
  const NamedTensor* ReducedParameter(std::string_view name) const;

 private:
  ParameterLayout layout_;
  std::vector<FlipTarget> targets_;
};

// The shape of the run a fault is checked against.
struct FaultRun {
  int ranks = 1;
  int64_t steps = 1;
  int batch = 1;
  bool resume = false;
};

// What tensor fault `f` (CorruptsTensor) makes of one element of `target`:
// `old_bits` holds the element (its target.element_bits low bits: a token
// byte or a float's bits), `element` is its index in the occurrence (one
// example's tensor, or the whole per-batch tensor) and `example` the example
// the fault hits (per-batch sites: the rank's first). Elements outside
// [f.index, f.index + f.elements) come back unchanged. Random draws are
// Philox blocks keyed by `seed` (the run's) at counter (element, example,
// step, rank): the same run corrupts the same bits every time.
uint32_t CorruptElement(const FaultSpec& f, const FlipTarget& target, uint64_t seed, uint64_t example,
                        uint64_t element, uint32_t old_bits);

// The EVENT text of a tensor fault that fired: "SPEC fired: element I bit B
// [of example E]" for a bitflip; "KIND fired: element I 0xOLD -> 0xNEW[ and
// N-1 more][ of example E] (SPEC)" for the others, what changed first (a
// payload keeps 100 bytes). `old_bits`/`new_bits`: element I before and after.
std::string FiredText(const FaultSpec& f, const FlipTarget& target, uint64_t example, uint32_t old_bits,
                      uint32_t new_bits);

// Checks that `fault` names something the run has (boundary, parameter,
// rank, step, example, element, bit, byte); InvalidArgument in one line otherwise,
// naming the closest real names for an unknown one. skip-restore's state
// name is checked by the trainer, which knows the restore plan.
Status CheckFault(const FaultSpec& fault, const FaultTargets& targets, const FaultRun& run);

// The `count` names of `names` closest to `name` (edit distance, then
// alphabetical), comma-separated, for error messages.
std::string ClosestNames(std::string_view name, const std::vector<std::string>& names, size_t count = 5);

}  // namespace dgrr::model
