#include "trace_format/boundary_scan.h"

#include <algorithm>
#include <array>

#include "base/cpu_isa.h"
#include "trace_format/record.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#endif

namespace dgrr::trace {
namespace {

// The rules that look beyond the record's own bytes, and the CRC. `&` rather
// than `&&`: every check is cheap and almost always passes, so one branch
// per record beats one per rule.
inline bool ContextValid(const uint8_t* p, uint32_t crc, const ScanState& s, uint64_t last_seq,
                         bool has_seq) {
  const BoundaryView view(p);
  return (StoredRecordCrc(p) == crc) & (view.name_id() < s.defined_names) & (view.rank() < s.world_size) &
         (!has_seq | (view.seq() > last_seq));
}

template <bool (*kFieldsValid)(const uint8_t*)>
size_t RunOf(const uint8_t* records, const uint32_t* crcs, size_t count, ScanState* state) {
  bool has_seq = state->has_seq;
  uint64_t last_seq = state->last_seq;
  size_t n = 0;
  for (; n < count; ++n) {
    const uint8_t* p = records + n * kRecordSize;
    if (!(kFieldsValid(p) & ContextValid(p, crcs[n], *state, last_seq, has_seq))) break;
    has_seq = true;
    last_seq = BoundaryView(p).seq();
  }
  if (n > 0) {
    state->has_seq = true;
    state->last_seq = last_seq;
  }
  return n;
}

#if defined(__x86_64__) && defined(__GNUC__)
// Bytes [0, 32) of a boundary in one vector: the byte rules (type, phase,
// direction and dtype bounds; bytes 29-31 zero) as saturating differences
// from per-byte bounds, and the name id (bytes 4-7) and rank (24-27) below
// their limits as unsigned 32-bit maxima; one compare and one mask for all.
// The shape slots, bytes [76, 124), as two overlapping vectors of four
// 64-bit slots (0-3 and 2-5), ANDed with the masks of the slots that must be
// zero for the record's ndim (kUnusedSlots, one table row per ndim 0..6);
// one VPTEST then says whether any of those bytes is nonzero. The first
// record, the only one that may come with no sequence number before it, is
// checked apart, so that the loop compares each seq with the last one
// unconditionally.
struct alignas(32) UnusedSlotMasks {
  uint64_t low[4];   // slots 0-3 (bytes [76, 108))
  uint64_t high[4];  // slots 2-5 (bytes [92, 124)); slots 2-3 are low's already
};
constexpr std::array<UnusedSlotMasks, kInlineDims + 1> MakeUnusedSlots() {
  std::array<UnusedSlotMasks, kInlineDims + 1> t{};
  for (size_t ndim = 0; ndim <= kInlineDims; ++ndim) {
    for (size_t slot = 0; slot < 4; ++slot) t[ndim].low[slot] = slot >= ndim ? ~uint64_t{0} : 0;
    for (size_t slot = 4; slot < 6; ++slot) t[ndim].high[slot - 2] = slot >= ndim ? ~uint64_t{0} : 0;
  }
  return t;
}
alignas(32) constexpr std::array<UnusedSlotMasks, kInlineDims + 1> kUnusedSlots = MakeUnusedSlots();

struct Avx2Bounds {
  __m256i byte_min, byte_max, word_max;
};

__attribute__((target("avx2"))) inline bool LocalRulesHoldAvx2(const uint8_t* p, const Avx2Bounds& b) {
  namespace at = boundary_layout;
  const __m256i head = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
  const __m256i outside = _mm256_or_si256(_mm256_subs_epu8(head, b.byte_max), _mm256_subs_epu8(b.byte_min, head));
  const __m256i in_range = _mm256_and_si256(_mm256_cmpeq_epi8(outside, _mm256_setzero_si256()),
                                            _mm256_cmpeq_epi32(_mm256_max_epu32(head, b.word_max), b.word_max));
  const bool head_valid = static_cast<uint32_t>(_mm256_movemask_epi8(in_range)) == 0xffffffffu;
  const UnusedSlotMasks& unused = kUnusedSlots[std::min<uint8_t>(p[at::kNdim], kInlineDims)];
  const __m256i slots0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + at::kDims));
  const __m256i slots2 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + at::kDims + 16));
  const __m256i stray = _mm256_or_si256(
      _mm256_and_si256(slots0, _mm256_load_si256(reinterpret_cast<const __m256i*>(unused.low))),
      _mm256_and_si256(slots2, _mm256_load_si256(reinterpret_cast<const __m256i*>(unused.high))));
  return head_valid & (_mm256_testz_si256(stray, stray) != 0);
}

__attribute__((target("avx2"))) size_t RunOfAvx2(const uint8_t* records, const uint32_t* crcs, size_t count,
                                                 ScanState* state) {
  namespace at = boundary_layout;
  static_assert(at::kPhase == 1 && at::kDirection == 2 && at::kDType == 3 && at::kNameId == 4 &&
                at::kSeq == 8 && at::kRank == 24 && at::kNdim == 28 && at::kDims == 76 && kInlineDims == 6);
  if (count == 0 || state->defined_names == 0 || state->world_size == 0) return 0;  // no boundary can be clean
  constexpr char kAny = -1;
  Avx2Bounds bounds;
  bounds.byte_min = _mm256_setr_epi8(static_cast<char>(RecordType::kBoundary), 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
                                     0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0);
  bounds.byte_max = _mm256_setr_epi8(static_cast<char>(RecordType::kBoundary), kMaxPhase, 1, kMaxDTypeValue, kAny,
                                     kAny, kAny, kAny, kAny, kAny, kAny, kAny, kAny, kAny, kAny, kAny, kAny, kAny,
                                     kAny, kAny, kAny, kAny, kAny, kAny, kAny, kAny, kAny, kAny, kAny, 0, 0, 0);
  // 32-bit words 1 (name id) and 6 (rank) at most limit - 1; the rest anything.
  bounds.word_max = _mm256_setr_epi32(-1, static_cast<int>(state->defined_names - 1), -1, -1, -1, -1,
                                      static_cast<int>(state->world_size - 1), -1);
  size_t n = 0;
  uint64_t last_seq = BoundaryView(records).seq();
  if (LocalRulesHoldAvx2(records, bounds) & (StoredRecordCrc(records) == crcs[0]) &
      (!state->has_seq | (last_seq > state->last_seq))) {
    for (n = 1; n < count; ++n) {
      const uint8_t* p = records + n * kRecordSize;
      const uint64_t seq = BoundaryView(p).seq();
      if (!(LocalRulesHoldAvx2(p, bounds) & (StoredRecordCrc(p) == crcs[n]) & (seq > last_seq))) break;
      last_seq = seq;
    }
    state->has_seq = true;
    state->last_seq = last_seq;
  }
  _mm256_zeroupper();
  return n;
}

bool CpuHasAvx2() {
  __builtin_cpu_init();
  return IsaAllowed(IsaLevel::kAvx2) && __builtin_cpu_supports("avx2") != 0;
}
#endif

ScanKernel DetectScanKernel() {
#if defined(__x86_64__) && defined(__GNUC__)
  if (CpuHasAvx2()) return ScanKernel::kAvx2;
#endif
#if defined(__SSE2__)
  return ScanKernel::kSse2;
#else
  return ScanKernel::kPortable;
#endif
}

}  // namespace

bool ScanKernelAvailable(ScanKernel kernel) {
  switch (kernel) {
    case ScanKernel::kPortable: return true;
#if defined(__SSE2__)
    case ScanKernel::kSse2: return true;
#endif
#if defined(__x86_64__) && defined(__GNUC__)
    case ScanKernel::kAvx2: return CpuHasAvx2();
#endif
    default: return false;
  }
}

ScanKernel SelectedScanKernel() {
  static const ScanKernel selected = DetectScanKernel();
  return selected;
}

const char* ScanKernelName(ScanKernel kernel) {
  switch (kernel) {
    case ScanKernel::kPortable: return "portable";
    case ScanKernel::kSse2: return "sse2";
    case ScanKernel::kAvx2: return "avx2";
  }
  return "unknown";
}

size_t CleanBoundaryRunWith(ScanKernel kernel, const uint8_t* records, const uint32_t* crcs, size_t count,
                            ScanState* state) {
  if (!ScanKernelAvailable(kernel)) kernel = SelectedScanKernel();
  switch (kernel) {
#if defined(__x86_64__) && defined(__GNUC__)
    case ScanKernel::kAvx2: return RunOfAvx2(records, crcs, count, state);
#endif
    case ScanKernel::kSse2: return RunOf<BoundaryFieldsValid>(records, crcs, count, state);
    default: return RunOf<BoundaryFieldsValidPortable>(records, crcs, count, state);
  }
}

size_t CleanBoundaryRun(const uint8_t* records, const uint32_t* crcs, size_t count, ScanState* state) {
  return CleanBoundaryRunWith(SelectedScanKernel(), records, crcs, count, state);
}

}  // namespace dgrr::trace
