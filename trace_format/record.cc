#include "trace_format/record.h"

#include <xxhash.h>

#include <algorithm>
#include <cstring>
#include <string>

#include "base/coding.h"
#include "trace_format/crc32c.h"

namespace dgrr::trace {
namespace {

// Field offsets inside the header (docs/trace-format.md, "Header").
namespace hdr {
constexpr size_t kMagic = 0, kVersion = 8, kHeaderSize = 12, kRecordSize = 16, kFlags = 20,
                 kRunId = 24, kSeed = 40, kRank = 48, kWorldSize = 52, kConfigDigest = 56,
                 kEnvDigest = 64, kCreated = 72, kReserved = 80;
}
// Field offsets inside each record type (docs/trace-format.md, "Records").
namespace name {
constexpr size_t kNameId = 4, kTotalLength = 8, kChunkOffset = 10, kChunkLength = 12;
}
namespace bnd {
constexpr size_t kPhase = 1, kDirection = 2, kDType = 3, kNameId = 4, kSeq = 8, kStep = 16,
                 kRank = 24, kNdim = 28, kByteCount = 32, kXor64 = 40, kXxh3 = 48,
                 kFirstExample = 56, kExampleCount = 64, kHostTime = 68, kDims = 76;
static_assert(kDims + 8 * kInlineDims == kRecordCrcOffset);
static_assert(kPhase == boundary_layout::kPhase && kDirection == boundary_layout::kDirection &&
              kDType == boundary_layout::kDType && kNameId == boundary_layout::kNameId &&
              kSeq == boundary_layout::kSeq && kStep == boundary_layout::kStep &&
              kRank == boundary_layout::kRank && kNdim == boundary_layout::kNdim &&
              kByteCount == boundary_layout::kByteCount && kXor64 == boundary_layout::kXor64 &&
              kXxh3 == boundary_layout::kXxh3 && kFirstExample == boundary_layout::kFirstExample &&
              kExampleCount == boundary_layout::kExampleCount &&
              kHostTime == boundary_layout::kHostTime && kDims == boundary_layout::kDims);
}  // namespace bnd
namespace stp {
constexpr size_t kKind = 1, kLossDType = 2, kStep = 8, kHostTime = 16, kLossBits = 24,
                 kParamsXor64 = 32, kParamsXxh3 = 40, kReserved = 48;
}
namespace evt {
constexpr size_t kKind = 1, kPayloadLength = 2, kStep = 8, kHostTime = 16;
}

inline bool AllZero(const uint8_t* p, size_t n) {
  for (size_t i = 0; i < n; ++i) {
    if (p[i] != 0) return false;
  }
  return true;
}

Status Bad(std::string reason) { return Status::Corruption(reason); }

// Inline so that the common case (all zero) builds no Status on the read path.
inline Status CheckReserved(const uint8_t* src, size_t begin, size_t end) {
  if (!AllZero(src + begin, end - begin)) [[unlikely]] {
    return Bad("reserved bytes " + std::to_string(begin) + ".." + std::to_string(end - 1) +
               " are not zero");
  }
  return Status::OK();
}

Status DecodeName(const uint8_t* src, NameChunk* chunk) {
  DGRR_RETURN_IF_ERROR(CheckReserved(src, 1, 4));
  DGRR_RETURN_IF_ERROR(CheckReserved(src, 13, 16));
  chunk->name_id = DecodeFixed32(src + name::kNameId);
  chunk->total_length = DecodeFixed16(src + name::kTotalLength);
  chunk->chunk_offset = DecodeFixed16(src + name::kChunkOffset);
  size_t length = src[name::kChunkLength];
  if (chunk->total_length == 0 || chunk->total_length > kMaxNameLength) {
    return Bad("name length " + std::to_string(chunk->total_length) + " out of range");
  }
  size_t expected = std::min<size_t>(kNameChunkCapacity, chunk->total_length - std::min<size_t>(chunk->chunk_offset, chunk->total_length));
  if (chunk->chunk_offset >= chunk->total_length || length != expected) {
    return Bad("name chunk offset " + std::to_string(chunk->chunk_offset) + " length " +
               std::to_string(length) + " inconsistent with name length " +
               std::to_string(chunk->total_length));
  }
  DGRR_RETURN_IF_ERROR(CheckReserved(src, kNameChunkOffset + length, kRecordCrcOffset));
  chunk->bytes.assign(reinterpret_cast<const char*>(src + kNameChunkOffset), length);
  if (chunk->bytes.find('\0') != std::string::npos) return Bad("name contains a NUL byte");
  return Status::OK();
}

Status DecodeBoundary(const uint8_t* src, BoundaryRecord* r) {
  if (src[bnd::kPhase] > kMaxPhase) return Bad("unknown phase " + std::to_string(src[bnd::kPhase]));
  if (src[bnd::kDirection] > 1) {
    return Bad("unknown direction " + std::to_string(src[bnd::kDirection]));
  }
  if (!IsValidDType(src[bnd::kDType])) return Bad("unknown dtype " + std::to_string(src[bnd::kDType]));
  DGRR_RETURN_IF_ERROR(CheckReserved(src, 29, 32));
  r->phase = static_cast<Phase>(src[bnd::kPhase]);
  r->direction = static_cast<Direction>(src[bnd::kDirection]);
  r->dtype = static_cast<DType>(src[bnd::kDType]);
  r->name_id = DecodeFixed32(src + bnd::kNameId);
  r->seq = DecodeFixed64(src + bnd::kSeq);
  r->step = DecodeFixed64(src + bnd::kStep);
  r->rank = DecodeFixed32(src + bnd::kRank);
  r->ndim = src[bnd::kNdim];
  r->byte_count = DecodeFixed64(src + bnd::kByteCount);
  r->xor64 = DecodeFixed64(src + bnd::kXor64);
  r->xxh3 = DecodeFixed64(src + bnd::kXxh3);
  r->first_example = DecodeFixed64(src + bnd::kFirstExample);
  r->example_count = DecodeFixed32(src + bnd::kExampleCount);
  r->host_time_ns = DecodeFixed64(src + bnd::kHostTime);
  for (size_t i = 0; i < kInlineDims; ++i) r->dims[i] = DecodeFixed64(src + bnd::kDims + 8 * i);
  for (size_t i = r->ndim; i < kInlineDims; ++i) {
    if (r->dims[i] != 0) return Bad("unused shape slot " + std::to_string(i) + " is not zero");
  }
  return Status::OK();
}

}  // namespace

std::string StepFieldsProblem(const StepRecord& r) {
  if (r.kind == StepKind::kBegin &&
      (r.loss_dtype != DType::kUnknown || r.loss_bits != 0 || r.params_xor64 != 0 ||
       r.params_xxh3 != 0)) {
    return "STEP begin with a nonzero loss or parameter field (only an end carries them)";
  }
  // A loss narrower than 8 bytes sits in the low bytes of loss_bits; the
  // bytes above it are zero, and there are no bits at all without a dtype.
  const size_t loss_bytes = DTypeSize(r.loss_dtype);
  if (loss_bytes > 8) return "loss dtype " + std::string(DTypeName(r.loss_dtype)) + " is wider than 8 bytes";
  if (loss_bytes < 8 && (r.loss_bits >> (8 * loss_bytes)) != 0) {
    return r.loss_dtype == DType::kUnknown
               ? std::string("nonzero loss_bits without a loss dtype")
               : "loss_bits has nonzero bits above its " + std::to_string(loss_bytes) + "-byte " +
                     std::string(DTypeName(r.loss_dtype)) + " value (it sits in the low bytes)";
  }
  return "";
}

namespace {

Status DecodeStep(const uint8_t* src, StepRecord* r) {
  if (src[stp::kKind] > 1) return Bad("unknown step kind " + std::to_string(src[stp::kKind]));
  if (!IsValidDType(src[stp::kLossDType])) {
    return Bad("unknown loss dtype " + std::to_string(src[stp::kLossDType]));
  }
  DGRR_RETURN_IF_ERROR(CheckReserved(src, 3, 8));
  DGRR_RETURN_IF_ERROR(CheckReserved(src, stp::kReserved, kRecordCrcOffset));
  r->kind = static_cast<StepKind>(src[stp::kKind]);
  r->loss_dtype = static_cast<DType>(src[stp::kLossDType]);
  r->step = DecodeFixed64(src + stp::kStep);
  r->host_time_ns = DecodeFixed64(src + stp::kHostTime);
  r->loss_bits = DecodeFixed64(src + stp::kLossBits);
  r->params_xor64 = DecodeFixed64(src + stp::kParamsXor64);
  r->params_xxh3 = DecodeFixed64(src + stp::kParamsXxh3);
  if (std::string problem = StepFieldsProblem(*r); !problem.empty()) return Bad(problem);
  return Status::OK();
}

Status DecodeEvent(const uint8_t* src, EventRecord* r) {
  uint8_t kind = src[evt::kKind];
  if (kind == 0 || kind > kMaxEventKind) return Bad("unknown event kind " + std::to_string(kind));
  size_t length = src[evt::kPayloadLength];
  if (length > kMaxEventPayload) return Bad("event payload length " + std::to_string(length) + " > 100");
  DGRR_RETURN_IF_ERROR(CheckReserved(src, 3, 8));
  DGRR_RETURN_IF_ERROR(CheckReserved(src, kEventPayloadOffset + length, kRecordCrcOffset));
  r->kind = static_cast<EventKind>(kind);
  r->step = DecodeFixed64(src + evt::kStep);
  r->host_time_ns = DecodeFixed64(src + evt::kHostTime);
  r->payload.assign(reinterpret_cast<const char*>(src + kEventPayloadOffset), length);
  return Status::OK();
}

}  // namespace

std::string_view PhaseName(Phase p) {
  switch (p) {
    case Phase::kData: return "data";
    case Phase::kForward: return "forward";
    case Phase::kBackward: return "backward";
    case Phase::kCollective: return "collective";
    case Phase::kOptimizer: return "optimizer";
  }
  return "invalid";
}

std::string_view DirectionName(Direction d) {
  return d == Direction::kInput ? "input" : d == Direction::kOutput ? "output" : "invalid";
}

std::string_view StepKindName(StepKind k) {
  return k == StepKind::kBegin ? "begin" : k == StepKind::kEnd ? "end" : "invalid";
}

std::string_view EventKindName(EventKind k) {
  switch (k) {
    case EventKind::kCheckpoint: return "checkpoint";
    case EventKind::kFaultInjected: return "fault_injected";
    case EventKind::kResumed: return "resumed";
    case EventKind::kRolledBack: return "rolled_back";
    case EventKind::kSdcMismatch: return "sdc_mismatch";
    case EventKind::kUser: return "user";
  }
  return "invalid";
}

std::string_view RecordTypeName(RecordType t) {
  switch (t) {
    case RecordType::kName: return "name";
    case RecordType::kBoundary: return "boundary";
    case RecordType::kStep: return "step";
    case RecordType::kEvent: return "event";
  }
  return "invalid";
}

uint64_t ShapeDigest(const uint64_t* dims, size_t ndim) {
  std::string bytes(8 * ndim, '\0');
  for (size_t i = 0; i < ndim; ++i) EncodeFixed64(reinterpret_cast<uint8_t*>(bytes.data()) + 8 * i, dims[i]);
  return XXH3_64bits(bytes.data(), bytes.size());
}

Status SetShape(BoundaryRecord* record, const uint64_t* dims, size_t ndim) {
  if (ndim > 255) return Status::InvalidArgument("tensor rank " + std::to_string(ndim) + " > 255");
  record->ndim = static_cast<uint8_t>(ndim);
  record->dims.fill(0);
  if (ndim <= kInlineDims) {
    for (size_t i = 0; i < ndim; ++i) record->dims[i] = dims[i];
  } else {
    for (size_t i = 0; i + 1 < kInlineDims; ++i) record->dims[i] = dims[i];
    record->dims[kInlineDims - 1] = ShapeDigest(dims, ndim);
  }
  return Status::OK();
}

void EncodeHeader(const TraceHeader& h, uint8_t* dst) {
  std::memset(dst, 0, kHeaderSize);
  std::memcpy(dst + hdr::kMagic, kMagic, sizeof kMagic);
  EncodeFixed32(dst + hdr::kVersion, kFormatVersion);
  EncodeFixed32(dst + hdr::kHeaderSize, kHeaderSize);
  EncodeFixed32(dst + hdr::kRecordSize, kRecordSize);
  EncodeFixed32(dst + hdr::kFlags, 0);
  std::memcpy(dst + hdr::kRunId, h.run_id.data(), h.run_id.size());
  EncodeFixed64(dst + hdr::kSeed, h.seed);
  EncodeFixed32(dst + hdr::kRank, h.rank);
  EncodeFixed32(dst + hdr::kWorldSize, h.world_size);
  EncodeFixed64(dst + hdr::kConfigDigest, h.config_digest);
  EncodeFixed64(dst + hdr::kEnvDigest, h.env_digest);
  EncodeFixed64(dst + hdr::kCreated, h.created_unix_ns);
  EncodeFixed32(dst + kHeaderCrcOffset, crc32c::Mask(crc32c::Value(dst, kHeaderCrcOffset)));
}

Status DecodeHeader(const uint8_t* src, size_t available, TraceHeader* h, size_t* bad_offset) {
  *bad_offset = 0;
  auto fail = [&](size_t offset, std::string reason) {
    *bad_offset = offset;
    return Status::Corruption(reason);
  };
  if (available < kHeaderSize) {
    return fail(available, "truncated header (" + std::to_string(available) + " of " +
                               std::to_string(kHeaderSize) + " bytes)");
  }
  if (std::memcmp(src + hdr::kMagic, kMagic, sizeof kMagic) != 0) {
    return fail(hdr::kMagic, "bad magic (not a dgrr trace)");
  }
  uint32_t stored_crc = crc32c::Unmask(DecodeFixed32(src + kHeaderCrcOffset));
  if (stored_crc != crc32c::Value(src, kHeaderCrcOffset)) {
    return fail(kHeaderCrcOffset, "header CRC mismatch");
  }
  // A newer writer's header still carries a valid CRC: say "version", not "corrupt".
  uint32_t version = DecodeFixed32(src + hdr::kVersion);
  if (version != kFormatVersion) {
    return fail(hdr::kVersion, "unsupported format version " + std::to_string(version) +
                                   " (this reader knows version " +
                                   std::to_string(kFormatVersion) + ")");
  }
  if (DecodeFixed32(src + hdr::kHeaderSize) != kHeaderSize) {
    return fail(hdr::kHeaderSize, "header size " + std::to_string(DecodeFixed32(src + hdr::kHeaderSize)) +
                                      " (expected 128)");
  }
  if (DecodeFixed32(src + hdr::kRecordSize) != kRecordSize) {
    return fail(hdr::kRecordSize, "record size " + std::to_string(DecodeFixed32(src + hdr::kRecordSize)) +
                                      " (expected 128)");
  }
  if (DecodeFixed32(src + hdr::kFlags) != 0) return fail(hdr::kFlags, "unknown header flags");
  if (!AllZero(src + hdr::kReserved, kHeaderCrcOffset - hdr::kReserved)) {
    return fail(hdr::kReserved, "reserved header bytes are not zero");
  }
  h->format_version = version;
  std::memcpy(h->run_id.data(), src + hdr::kRunId, h->run_id.size());
  h->seed = DecodeFixed64(src + hdr::kSeed);
  h->rank = DecodeFixed32(src + hdr::kRank);
  h->world_size = DecodeFixed32(src + hdr::kWorldSize);
  h->config_digest = DecodeFixed64(src + hdr::kConfigDigest);
  h->env_digest = DecodeFixed64(src + hdr::kEnvDigest);
  h->created_unix_ns = DecodeFixed64(src + hdr::kCreated);
  if (h->world_size == 0 || h->rank >= h->world_size) {
    return fail(hdr::kRank, "rank " + std::to_string(h->rank) + " not below world size " +
                                std::to_string(h->world_size));
  }
  return Status::OK();
}

void EncodeBoundary(const BoundaryRecord& r, uint8_t* dst) {
  dst[0] = static_cast<uint8_t>(RecordType::kBoundary);
  dst[bnd::kPhase] = static_cast<uint8_t>(r.phase);
  dst[bnd::kDirection] = static_cast<uint8_t>(r.direction);
  dst[bnd::kDType] = static_cast<uint8_t>(r.dtype);
  EncodeFixed32(dst + bnd::kNameId, r.name_id);
  EncodeFixed64(dst + bnd::kSeq, r.seq);
  EncodeFixed64(dst + bnd::kStep, r.step);
  EncodeFixed32(dst + bnd::kRank, r.rank);
  dst[bnd::kNdim] = r.ndim;
  dst[29] = dst[30] = dst[31] = 0;
  EncodeFixed64(dst + bnd::kByteCount, r.byte_count);
  EncodeFixed64(dst + bnd::kXor64, r.xor64);
  EncodeFixed64(dst + bnd::kXxh3, r.xxh3);
  EncodeFixed64(dst + bnd::kFirstExample, r.first_example);
  EncodeFixed32(dst + bnd::kExampleCount, r.example_count);
  EncodeFixed64(dst + bnd::kHostTime, r.host_time_ns);
  for (size_t i = 0; i < kInlineDims; ++i) EncodeFixed64(dst + bnd::kDims + 8 * i, r.dims[i]);
}

void EncodeStep(const StepRecord& r, uint8_t* dst) {
  std::memset(dst, 0, kRecordCrcOffset);
  dst[0] = static_cast<uint8_t>(RecordType::kStep);
  dst[stp::kKind] = static_cast<uint8_t>(r.kind);
  dst[stp::kLossDType] = static_cast<uint8_t>(r.loss_dtype);
  EncodeFixed64(dst + stp::kStep, r.step);
  EncodeFixed64(dst + stp::kHostTime, r.host_time_ns);
  EncodeFixed64(dst + stp::kLossBits, r.loss_bits);
  EncodeFixed64(dst + stp::kParamsXor64, r.params_xor64);
  EncodeFixed64(dst + stp::kParamsXxh3, r.params_xxh3);
}

void EncodeEvent(const EventRecord& r, uint8_t* dst) {
  std::memset(dst, 0, kRecordCrcOffset);
  dst[0] = static_cast<uint8_t>(RecordType::kEvent);
  dst[evt::kKind] = static_cast<uint8_t>(r.kind);
  dst[evt::kPayloadLength] = static_cast<uint8_t>(r.payload.size());
  EncodeFixed64(dst + evt::kStep, r.step);
  EncodeFixed64(dst + evt::kHostTime, r.host_time_ns);
  std::memcpy(dst + kEventPayloadOffset, r.payload.data(), r.payload.size());
}

void EncodeNameChunk(const NameChunk& c, uint8_t* dst) {
  std::memset(dst, 0, kRecordCrcOffset);
  dst[0] = static_cast<uint8_t>(RecordType::kName);
  EncodeFixed32(dst + name::kNameId, c.name_id);
  EncodeFixed16(dst + name::kTotalLength, c.total_length);
  EncodeFixed16(dst + name::kChunkOffset, c.chunk_offset);
  dst[name::kChunkLength] = static_cast<uint8_t>(c.bytes.size());
  std::memcpy(dst + kNameChunkOffset, c.bytes.data(), c.bytes.size());
}

void SealRecord(uint8_t* record) {
  EncodeFixed32(record + kRecordCrcOffset, crc32c::Mask(crc32c::Value(record, kRecordCrcOffset)));
}

void SealRecords(uint8_t* records, size_t count) {
  constexpr size_t kBatch = 64;
  uint32_t crcs[kBatch];
  for (size_t first = 0; first < count; first += kBatch) {
    const size_t n = std::min(kBatch, count - first);
    uint8_t* batch = records + first * kRecordSize;
    crc32c::ValueOfBlocks(batch, kRecordSize, kRecordCrcOffset, n, crcs);
    for (size_t i = 0; i < n; ++i) {
      EncodeFixed32(batch + i * kRecordSize + kRecordCrcOffset, crc32c::Mask(crcs[i]));
    }
  }
}

bool RecordCrcMatches(const uint8_t* record) {
  return crc32c::Unmask(DecodeFixed32(record + kRecordCrcOffset)) ==
         crc32c::Value(record, kRecordCrcOffset);
}

// Reuses the alternative already held (the common case when scanning a trace
// of boundaries) instead of destroying and rebuilding it.
template <typename T>
T* Hold(RecordBody* body) {
  if (T* held = std::get_if<T>(body)) return held;
  return &body->emplace<T>();
}

bool DecodeBoundaryIfValid(const uint8_t* src, BoundaryRecord* r) {
  if (!BoundaryFieldsValid(src)) [[unlikely]] return false;
  const BoundaryView view(src);
  r->phase = view.phase();
  r->direction = view.direction();
  r->dtype = view.dtype();
  r->name_id = view.name_id();
  r->seq = view.seq();
  r->step = view.step();
  r->rank = view.rank();
  r->ndim = view.ndim();
  r->byte_count = view.byte_count();
  r->xor64 = view.xor64();
  r->xxh3 = view.xxh3();
  r->first_example = view.first_example();
  r->example_count = view.example_count();
  r->host_time_ns = view.host_time_ns();
  for (size_t i = 0; i < kInlineDims; ++i) r->dims[i] = view.dim(i);
  return true;
}

static_assert(crc32c::kMaskDelta == 0xa282ead8u, "StoredRecordCrc inlines crc32c::Unmask");

Status DecodeRecord(const uint8_t* src, RecordBody* body) {
  if (!RecordCrcMatches(src)) return Bad("CRC mismatch");
  return DecodeRecordFields(src, body);
}

Status DecodeRecordFields(const uint8_t* src, RecordBody* body) {
  switch (static_cast<RecordType>(src[0])) {
    case RecordType::kName: return DecodeName(src, Hold<NameChunk>(body));
    case RecordType::kBoundary: return DecodeBoundary(src, Hold<BoundaryRecord>(body));
    case RecordType::kStep: return DecodeStep(src, Hold<StepRecord>(body));
    case RecordType::kEvent: return DecodeEvent(src, Hold<EventRecord>(body));
  }
  return Bad("unknown record type " + std::to_string(src[0]));
}

}  // namespace dgrr::trace
