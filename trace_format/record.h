// The trace format's types and their byte encodings (docs/trace-format.md is
// the normative spec; this header is the only one shared by writer and reader).
//
// A trace file is a 128-byte header followed by 128-byte records. Every field
// is encoded byte by byte in little-endian order through base/coding.h; no
// struct is ever copied onto disk bytes, so the C++ types below may change
// freely while the bytes may not.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>
#include <variant>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include "base/coding.h"
#include "base/dtype.h"
#include "base/status.h"

namespace dgrr::trace {

inline constexpr size_t kHeaderSize = 128;
inline constexpr size_t kRecordSize = 128;
inline constexpr uint32_t kFormatVersion = 1;
inline constexpr char kMagic[8] = {'D', 'G', 'R', 'R', 'T', 'R', 'A', 'C'};
// Offsets of the stored (masked) CRC32Cs; each covers every byte before it.
inline constexpr size_t kHeaderCrcOffset = kHeaderSize - 4;
inline constexpr size_t kRecordCrcOffset = kRecordSize - 4;

// Longest boundary name, in bytes (names travel over several NAME records).
inline constexpr size_t kMaxNameLength = 4096;
inline constexpr size_t kNameChunkOffset = 16;
inline constexpr size_t kNameChunkCapacity = kRecordCrcOffset - kNameChunkOffset;  // 108
// Dimensions stored inline in a BOUNDARY record; longer shapes keep their
// first kInlineDims - 1 dims and a digest of all of them in the last slot.
inline constexpr size_t kInlineDims = 6;
inline constexpr size_t kEventPayloadOffset = 24;
inline constexpr size_t kMaxEventPayload = kRecordCrcOffset - kEventPayloadOffset;  // 100

static_assert(kHeaderSize % 8 == 0 && kRecordSize % 8 == 0);
static_assert(kNameChunkCapacity == 108);
static_assert(kMaxEventPayload == 100);
static_assert((kMaxNameLength + kNameChunkCapacity - 1) / kNameChunkCapacity < 64);

enum class RecordType : uint8_t {
  kName = 1,
  kBoundary = 2,
  kStep = 3,
  kEvent = 4,
};

enum class Phase : uint8_t { kData = 0, kForward = 1, kBackward = 2, kCollective = 3, kOptimizer = 4 };
inline constexpr uint8_t kMaxPhase = 4;
enum class Direction : uint8_t { kInput = 0, kOutput = 1 };
enum class StepKind : uint8_t { kBegin = 0, kEnd = 1 };
enum class EventKind : uint8_t {
  kCheckpoint = 1,     // a checkpoint of this step was written
  kFaultInjected = 2,  // a fault was injected on purpose (testing)
  kResumed = 3,        // the run resumed from a checkpoint
  kRolledBack = 4,     // the trace was cut back to a checkpoint
  kSdcMismatch = 5,    // a silent-data-corruption check failed
  kUser = 6,           // application-defined; the payload says what
};
inline constexpr uint8_t kMaxEventKind = 6;

std::string_view PhaseName(Phase p);
std::string_view DirectionName(Direction d);
std::string_view StepKindName(StepKind k);
std::string_view EventKindName(EventKind k);
std::string_view RecordTypeName(RecordType t);

struct TraceHeader {
  uint32_t format_version = kFormatVersion;  // set by the writer; checked by the reader
  std::array<uint8_t, 16> run_id{};
  uint64_t seed = 0;
  uint32_t rank = 0;
  uint32_t world_size = 1;
  uint64_t config_digest = 0;
  uint64_t env_digest = 0;
  uint64_t created_unix_ns = 0;
  bool operator==(const TraceHeader&) const = default;
};

// One chunk of a boundary name being interned (the reader reassembles them).
struct NameChunk {
  uint32_t name_id = 0;
  uint16_t total_length = 0;
  uint16_t chunk_offset = 0;
  std::string bytes;  // this chunk's part of the name
  bool operator==(const NameChunk&) const = default;
};

// A tensor crossing a model-level operator boundary.
struct BoundaryRecord {
  uint64_t step = 0;
  uint64_t seq = 0;  // per-rank sequence number; strictly increasing in a trace
  uint32_t name_id = 0;
  Phase phase = Phase::kForward;
  Direction direction = Direction::kOutput;
  DType dtype = DType::kF32;
  uint32_t rank = 0;
  uint8_t ndim = 0;
  // dims[0..ndim) when ndim <= kInlineDims; otherwise dims[0..5) and
  // dims[5] = ShapeDigest(all dims). Unused slots are zero.
  std::array<uint64_t, kInlineDims> dims{};
  uint64_t byte_count = 0;
  uint64_t first_example = 0;
  uint32_t example_count = 0;
  uint64_t xor64 = 0;
  uint64_t xxh3 = 0;
  uint64_t host_time_ns = 0;
  bool operator==(const BoundaryRecord&) const = default;
};

struct StepRecord {
  uint64_t step = 0;
  StepKind kind = StepKind::kBegin;
  uint64_t host_time_ns = 0;
  // End only: the loss as stored bits of `loss_dtype` (f32 bits in the low
  // 32 bits, f64 bits in all 64; kUnknown = no loss recorded) and a
  // fingerprint of all parameters after the optimizer update.
  DType loss_dtype = DType::kUnknown;
  uint64_t loss_bits = 0;
  uint64_t params_xor64 = 0;
  uint64_t params_xxh3 = 0;
  bool operator==(const StepRecord&) const = default;
};

struct EventRecord {
  uint64_t step = 0;
  EventKind kind = EventKind::kUser;
  uint64_t host_time_ns = 0;
  std::string payload;  // at most kMaxEventPayload bytes
  bool operator==(const EventRecord&) const = default;
};

using RecordBody = std::variant<NameChunk, BoundaryRecord, StepRecord, EventRecord>;
struct Record {
  uint64_t index = 0;  // position in the trace: offset = kHeaderSize + index * kRecordSize
  RecordBody body;
};

inline constexpr uint64_t RecordOffset(uint64_t index) { return kHeaderSize + index * kRecordSize; }

// Fills a BoundaryRecord's ndim/dims from a full shape (digest when too long).
Status SetShape(BoundaryRecord* record, const uint64_t* dims, size_t ndim);
// XXH3-64 of the dims as little-endian u64s: the digest of a long shape.
uint64_t ShapeDigest(const uint64_t* dims, size_t ndim);

// ---- Encoding. Encode* writes every byte of dst[0, kRecordSize) except the
// CRC, which SealRecord computes; keeping the two apart lets the writer move
// the checksum off the training thread.
void EncodeHeader(const TraceHeader& header, uint8_t* dst);  // includes its CRC
void EncodeBoundary(const BoundaryRecord& record, uint8_t* dst);
void EncodeStep(const StepRecord& record, uint8_t* dst);
// Requires payload.size() <= kMaxEventPayload.
void EncodeEvent(const EventRecord& record, uint8_t* dst);
// Requires bytes.size() <= kNameChunkCapacity.
void EncodeNameChunk(const NameChunk& chunk, uint8_t* dst);
void SealRecord(uint8_t* record);
// Seals `count` consecutive records at once (faster: see crc32c::ValueOfBlocks).
void SealRecords(uint8_t* records, size_t count);
bool RecordCrcMatches(const uint8_t* record);

// Why a STEP record's fields are inconsistent (a begin carrying a loss or
// parameter fingerprint, loss bits outside the loss dtype's low bytes), or
// empty when they are not. The writer refuses such a record; the reader
// reports it as corruption.
std::string StepFieldsProblem(const StepRecord& record);

// ---- Decoding. Both validate everything local to the bytes (CRC, known type,
// enum ranges, reserved bytes zero) and return Corruption with a reason that
// does not yet name file or offset; the caller adds those.
Status DecodeHeader(const uint8_t* src, size_t available, TraceHeader* header, size_t* bad_offset);
Status DecodeRecord(const uint8_t* src, RecordBody* body);
// DecodeRecord without the CRC check, for a caller that has checked it
// (the reader checks a whole buffer of records at once).
Status DecodeRecordFields(const uint8_t* src, RecordBody* body);
// Where a BOUNDARY record keeps its fields (docs/trace-format.md, "Records").
namespace boundary_layout {
inline constexpr size_t kPhase = 1, kDirection = 2, kDType = 3, kNameId = 4, kSeq = 8, kStep = 16,
                        kRank = 24, kNdim = 28, kByteCount = 32, kXor64 = 40, kXxh3 = 48,
                        kFirstExample = 56, kExampleCount = 64, kHostTime = 68, kDims = 76;
static_assert(kDims + 8 * kInlineDims == kRecordCrcOffset);
}  // namespace boundary_layout

// True when the bytes are a BOUNDARY record that keeps every rule local to
// it apart from the CRC: known phase, direction and dtype, reserved bytes and
// unused shape slots zero. Branch-free (the rules almost always hold, so one
// branch on the result beats one per rule); inline for the reader's scan.
// The definition, one rule at a time:
inline bool BoundaryFieldsValidPortable(const uint8_t* p) {
  namespace at = boundary_layout;
  const uint8_t ndim = p[at::kNdim];
  const bool valid = (p[0] == static_cast<uint8_t>(RecordType::kBoundary)) &
                     (p[at::kPhase] <= kMaxPhase) & (p[at::kDirection] <= 1) &
                     IsValidDType(p[at::kDType]) & ((p[29] | p[30] | p[31]) == 0);
  // Bit i set: shape slot i holds a nonzero value (compared with zero, so
  // byte order is moot). Slots at and above ndim must be zero.
  unsigned nonzero_slots = 0;
  for (size_t i = 0; i < kInlineDims; ++i) {
    uint64_t dim;
    std::memcpy(&dim, p + at::kDims + 8 * i, 8);
    nonzero_slots |= static_cast<unsigned>(dim != 0) << i;
  }
  const unsigned used_slots = ndim >= kInlineDims ? 0x3fu : (1u << ndim) - 1;
  return valid & ((nonzero_slots & ~used_slots) == 0);
}

#if defined(__SSE2__)
// The same rules with SSE2 (part of every x86-64 CPU): the byte rules as
// saturating differences from per-byte bounds in one 16-byte compare, the
// shape slots as a mask of zero 32-bit words (the reader's scan loop: ~60
// instructions a record instead of ~75, and 15% faster).
inline bool BoundaryFieldsValid(const uint8_t* p) {
  namespace at = boundary_layout;
  static_assert(at::kPhase == 1 && at::kDirection == 2 && at::kDType == 3 && at::kDims == 76 &&
                kInlineDims == 6);
  const __m128i head = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  const __m128i reserved = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 16));
  // Bytes 0-3 between these bounds (0xff above: any value); bytes 29-31 zero.
  const __m128i head_min = _mm_setr_epi8(static_cast<char>(RecordType::kBoundary), 0, 0, 0, 0, 0, 0, 0,
                                         0, 0, 0, 0, 0, 0, 0, 0);
  const __m128i head_max =
      _mm_setr_epi8(static_cast<char>(RecordType::kBoundary), kMaxPhase, 1, kMaxDTypeValue, -1, -1, -1,
                    -1, -1, -1, -1, -1, -1, -1, -1, -1);
  const __m128i reserved_max = _mm_setr_epi8(-1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, 0, 0, 0);
  const __m128i outside = _mm_or_si128(
      _mm_or_si128(_mm_subs_epu8(head, head_max), _mm_subs_epu8(head_min, head)),
      _mm_subs_epu8(reserved, reserved_max));
  const __m128i zero = _mm_setzero_si128();
  const bool bytes_valid = _mm_movemask_epi8(_mm_cmpeq_epi8(outside, zero)) == 0xffff;
  // Bit k: 32-bit word k of the six shape slots (bytes [76, 124)) is zero.
  auto zero_words = [&](size_t offset) {
    const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p + offset));
    return static_cast<unsigned>(_mm_movemask_ps(_mm_castsi128_ps(_mm_cmpeq_epi32(v, zero))));
  };
  const unsigned zero_slot_words = zero_words(76) | zero_words(92) << 4 | zero_words(108) << 8;
  // The words of the slots at and above ndim, which must be zero.
  const uint8_t ndim = p[at::kNdim];
  const unsigned unused_words = ndim >= kInlineDims ? 0u : (0xfffu << (2 * ndim)) & 0xfffu;
  return bytes_valid & ((unused_words & ~zero_slot_words) == 0);
}
#else
inline bool BoundaryFieldsValid(const uint8_t* p) { return BoundaryFieldsValidPortable(p); }
#endif

// Read-only fields of a BOUNDARY record in its encoded bytes, for bytes the
// reader has validated (TraceReader::NextBoundaryRun): a scan that needs a
// few fields reads them where they lie instead of decoding the whole record.
class BoundaryView {
 public:
  explicit BoundaryView(const uint8_t* bytes) : p_(bytes) {}
  Phase phase() const { return static_cast<Phase>(p_[boundary_layout::kPhase]); }
  Direction direction() const { return static_cast<Direction>(p_[boundary_layout::kDirection]); }
  DType dtype() const { return static_cast<DType>(p_[boundary_layout::kDType]); }
  uint32_t name_id() const { return DecodeFixed32(p_ + boundary_layout::kNameId); }
  uint64_t seq() const { return DecodeFixed64(p_ + boundary_layout::kSeq); }
  uint64_t step() const { return DecodeFixed64(p_ + boundary_layout::kStep); }
  uint32_t rank() const { return DecodeFixed32(p_ + boundary_layout::kRank); }
  uint8_t ndim() const { return p_[boundary_layout::kNdim]; }
  uint64_t byte_count() const { return DecodeFixed64(p_ + boundary_layout::kByteCount); }
  uint64_t xor64() const { return DecodeFixed64(p_ + boundary_layout::kXor64); }
  uint64_t xxh3() const { return DecodeFixed64(p_ + boundary_layout::kXxh3); }
  uint64_t first_example() const { return DecodeFixed64(p_ + boundary_layout::kFirstExample); }
  uint32_t example_count() const { return DecodeFixed32(p_ + boundary_layout::kExampleCount); }
  uint64_t host_time_ns() const { return DecodeFixed64(p_ + boundary_layout::kHostTime); }
  uint64_t dim(size_t i) const { return DecodeFixed64(p_ + boundary_layout::kDims + 8 * i); }
  const uint8_t* bytes() const { return p_; }

 private:
  const uint8_t* p_;
};

// The hot path of a scan: decodes a BOUNDARY record whose CRC the caller has
// checked and returns true when every local rule holds (known phase,
// direction and dtype, reserved bytes and unused shape slots zero), with one
// branch for all of them. False says only "not a clean boundary": the record
// may be of another type or break a rule, and DecodeRecordFields then gives
// the reason; *record is unspecified after false.
bool DecodeBoundaryIfValid(const uint8_t* src, BoundaryRecord* record);
// The unmasked CRC stored in a record (inline: the reader's scan calls it
// once a record).
inline uint32_t StoredRecordCrc(const uint8_t* record) {
  const uint32_t rot = DecodeFixed32(record + kRecordCrcOffset) - 0xa282ead8u;  // crc32c::Unmask
  return (rot >> 17) | (rot << 15);
}

}  // namespace dgrr::trace
