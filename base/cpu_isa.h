// The widest vector instruction set dgrr's dispatched kernels may use.
//
// Every kernel chosen at run time (fingerprint stripes, CRC32C folds, the
// trace scan, Philox fills, the model's products and layers) gives the same
// bits on every instruction set (each is tested against its portable form),
// so capping the set changes speed only. The cap exists to measure and test
// the AVX2 paths on a CPU that has AVX-512, the way users on the common
// cloud CPU (AVX2, no AVX-512) run them:
//
//     DGRR_MAX_ISA=avx2 dgrr ...      at most AVX2 (+FMA, 256-bit VPCLMULQDQ)
//     DGRR_MAX_ISA=sse2 dgrr ...      no AVX of any width (SSE4.2's crc32
//                                     stays where the CPU has it)
//     DGRR_MAX_ISA=avx512 or unset    whatever the CPU offers
//
// The variable is read once, at the first dispatch; a value outside those is
// ignored by the library (no cap) and refused by the CLI in one line
// (CheckMaxIsaEnvironment). Libraries dgrr links (libxxhash's own dispatch,
// MKL, OpenBLAS) are not capped by it.
#pragma once

#include "base/status.h"

namespace dgrr {

enum class IsaLevel { kSse2 = 0, kAvx2 = 1, kAvx512 = 2 };

// The cap: kAvx512 unless DGRR_MAX_ISA names a lower level.
IsaLevel MaxIsa();
// Whether dispatchers may use `level` (the CPU must also support it).
inline bool IsaAllowed(IsaLevel level) { return static_cast<int>(level) <= static_cast<int>(MaxIsa()); }
const char* IsaLevelName(IsaLevel level);  // "sse2", "avx2", "avx512"

// InvalidArgument naming the variable and its accepted values when
// DGRR_MAX_ISA is set to anything else; OK otherwise.
Status CheckMaxIsaEnvironment();

}  // namespace dgrr
