#include "trace_format/boundary_scan.h"

#include <algorithm>

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
// 64-bit slots (0-3 and 2-5), each slot compared with zero.
__attribute__((target("avx2"))) size_t RunOfAvx2(const uint8_t* records, const uint32_t* crcs, size_t count,
                                                 ScanState* state) {
  namespace at = boundary_layout;
  static_assert(at::kPhase == 1 && at::kDirection == 2 && at::kDType == 3 && at::kNameId == 4 &&
                at::kSeq == 8 && at::kRank == 24 && at::kNdim == 28 && at::kDims == 76 && kInlineDims == 6);
  if (state->defined_names == 0 || state->world_size == 0) return 0;  // no boundary can be clean
  constexpr char kAny = -1;
  const __m256i byte_min = _mm256_setr_epi8(static_cast<char>(RecordType::kBoundary), 0, 0, 0, 0, 0, 0, 0,
                                            0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
                                            0, 0, 0, 0);
  const __m256i byte_max = _mm256_setr_epi8(
      static_cast<char>(RecordType::kBoundary), kMaxPhase, 1, kMaxDTypeValue, kAny, kAny, kAny, kAny, kAny,
      kAny, kAny, kAny, kAny, kAny, kAny, kAny, kAny, kAny, kAny, kAny, kAny, kAny, kAny, kAny, kAny, kAny,
      kAny, kAny, kAny, 0, 0, 0);
  // 32-bit words 1 (name id) and 6 (rank) at most limit - 1; the rest anything.
  const __m256i word_max = _mm256_setr_epi32(-1, static_cast<int>(state->defined_names - 1), -1, -1, -1, -1,
                                             static_cast<int>(state->world_size - 1), -1);
  const __m256i zero = _mm256_setzero_si256();
  bool has_seq = state->has_seq;
  uint64_t last_seq = state->last_seq;
  size_t n = 0;
  for (; n < count; ++n) {
    const uint8_t* p = records + n * kRecordSize;
    const __m256i head = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
    const __m256i outside = _mm256_or_si256(_mm256_subs_epu8(head, byte_max), _mm256_subs_epu8(byte_min, head));
    const __m256i in_range = _mm256_and_si256(_mm256_cmpeq_epi8(outside, zero),
                                              _mm256_cmpeq_epi32(_mm256_max_epu32(head, word_max), word_max));
    const bool head_valid = static_cast<uint32_t>(_mm256_movemask_epi8(in_range)) == 0xffffffffu;
    const __m256i slots0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + at::kDims));
    const __m256i slots2 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + at::kDims + 16));
    const unsigned zero_slots =
        static_cast<unsigned>(_mm256_movemask_pd(_mm256_castsi256_pd(_mm256_cmpeq_epi64(slots0, zero)))) |
        static_cast<unsigned>(_mm256_movemask_pd(_mm256_castsi256_pd(_mm256_cmpeq_epi64(slots2, zero)))) << 2;
    // Slots at and above ndim must be zero (none when ndim >= 6).
    const unsigned unused = (0x3fu << std::min<unsigned>(p[at::kNdim], kInlineDims)) & 0x3fu;
    const uint64_t seq = BoundaryView(p).seq();
    const bool clean = head_valid & ((unused & ~zero_slots) == 0) & (StoredRecordCrc(p) == crcs[n]) &
                       (!has_seq | (seq > last_seq));
    if (!clean) break;
    has_seq = true;
    last_seq = seq;
  }
  if (n > 0) {
    state->has_seq = true;
    state->last_seq = last_seq;
  }
  _mm256_zeroupper();
  return n;
}

bool CpuHasAvx2() {
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx2") != 0;
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
