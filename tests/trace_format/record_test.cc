// Record and header encodings: round trips, pinned byte positions, and the
// field checks the decoder makes beyond the CRC.
#include "trace_format/record.h"

#include <gtest/gtest.h>
#include <xxhash.h>

#include <cstring>

#include "base/coding.h"
#include "trace_format/crc32c.h"
#include "tests/trace_format/sample_trace.h"

namespace dgrr::trace {
namespace {

using testing::SampleBoundary;
using testing::SampleHeader;

std::string Hex(const uint8_t* p, size_t n) {
  static const char* digits = "0123456789abcdef";
  std::string s;
  for (size_t i = 0; i < n; ++i) {
    s.push_back(digits[p[i] >> 4]);
    s.push_back(digits[p[i] & 15]);
  }
  return s;
}

TEST(Record, HeaderRoundTripAndLayout) {
  uint8_t bytes[kHeaderSize];
  EncodeHeader(SampleHeader(), bytes);
  EXPECT_EQ(std::memcmp(bytes, "DGRRTRAC", 8), 0);
  EXPECT_EQ(DecodeFixed32(bytes + 8), kFormatVersion);
  EXPECT_EQ(DecodeFixed32(bytes + 12), 128u);
  EXPECT_EQ(DecodeFixed32(bytes + 16), 128u);
  EXPECT_EQ(bytes[24], 0xa0);
  EXPECT_EQ(DecodeFixed64(bytes + 40), 1234u);
  EXPECT_EQ(DecodeFixed32(bytes + 48), 1u);
  EXPECT_EQ(DecodeFixed32(bytes + 52), 2u);
  EXPECT_EQ(DecodeFixed64(bytes + 56), 0x1122334455667788ull);
  EXPECT_EQ(DecodeFixed64(bytes + 72), 1700000000000000000ull);
  EXPECT_EQ(crc32c::Unmask(DecodeFixed32(bytes + 124)), crc32c::Value(bytes, 124));
  TraceHeader decoded;
  size_t bad = 99;
  ASSERT_TRUE(DecodeHeader(bytes, kHeaderSize, &decoded, &bad).ok());
  EXPECT_EQ(decoded, SampleHeader());
}

TEST(Record, HeaderRejections) {
  uint8_t bytes[kHeaderSize];
  TraceHeader h;
  size_t bad = 0;
  EncodeHeader(SampleHeader(), bytes);
  EXPECT_TRUE(DecodeHeader(bytes, 100, &h, &bad).IsCorruption());
  EXPECT_EQ(bad, 100u);

  bytes[0] = 'X';
  Status s = DecodeHeader(bytes, kHeaderSize, &h, &bad);
  EXPECT_NE(s.message().find("bad magic"), std::string::npos);
  EXPECT_EQ(bad, 0u);

  // A future version with a valid CRC: "unsupported version", not "corrupt".
  EncodeHeader(SampleHeader(), bytes);
  EncodeFixed32(bytes + 8, 2);
  EncodeFixed32(bytes + 124, crc32c::Mask(crc32c::Value(bytes, 124)));
  s = DecodeHeader(bytes, kHeaderSize, &h, &bad);
  EXPECT_NE(s.message().find("unsupported format version 2"), std::string::npos) << s.message();
  EXPECT_EQ(bad, 8u);

  EncodeHeader(SampleHeader(), bytes);
  bytes[100] = 1;  // reserved byte, CRC fixed up
  EncodeFixed32(bytes + 124, crc32c::Mask(crc32c::Value(bytes, 124)));
  EXPECT_TRUE(DecodeHeader(bytes, kHeaderSize, &h, &bad).IsCorruption());

  EncodeHeader(SampleHeader(), bytes);
  bytes[60] ^= 4;  // no CRC fix-up
  s = DecodeHeader(bytes, kHeaderSize, &h, &bad);
  EXPECT_NE(s.message().find("header CRC mismatch"), std::string::npos);
}

TEST(Record, BoundaryRoundTripAndPinnedBytes) {
  BoundaryRecord b = SampleBoundary(7, 3, 0x0102030405060708ull);
  uint8_t bytes[kRecordSize];
  EncodeBoundary(b, bytes);
  SealRecord(bytes);
  // Byte positions are the spec's (docs/trace-format.md); a change here is a
  // format change and needs a new version.
  EXPECT_EQ(bytes[0], 2);
  EXPECT_EQ(bytes[1], static_cast<uint8_t>(b.phase));
  EXPECT_EQ(bytes[3], static_cast<uint8_t>(DType::kF32));
  EXPECT_EQ(DecodeFixed32(bytes + 4), 7u);
  EXPECT_EQ(Hex(bytes + 8, 8), "0807060504030201");
  EXPECT_EQ(DecodeFixed64(bytes + 16), 3u);
  EXPECT_EQ(bytes[28], 2);
  EXPECT_EQ(DecodeFixed64(bytes + 32), 24u);
  EXPECT_EQ(DecodeFixed64(bytes + 40), b.xor64);
  EXPECT_EQ(DecodeFixed64(bytes + 48), b.xxh3);
  EXPECT_EQ(DecodeFixed64(bytes + 56), 6u);
  EXPECT_EQ(DecodeFixed32(bytes + 64), 2u);
  EXPECT_EQ(DecodeFixed64(bytes + 68), b.host_time_ns);
  EXPECT_EQ(DecodeFixed64(bytes + 76), 2u);
  EXPECT_EQ(DecodeFixed64(bytes + 84), 3u);
  RecordBody body;
  ASSERT_TRUE(DecodeRecord(bytes, &body).ok());
  EXPECT_EQ(std::get<BoundaryRecord>(body), b);
}

TEST(Record, StepEventNameRoundTrip) {
  uint8_t bytes[kRecordSize];
  RecordBody body;
  StepRecord step{.step = 9, .kind = StepKind::kEnd, .host_time_ns = 10,
                  .loss_dtype = DType::kF64, .loss_bits = DoubleBits(2.5),
                  .params_xor64 = 1, .params_xxh3 = 2};
  EncodeStep(step, bytes);
  SealRecord(bytes);
  ASSERT_TRUE(DecodeRecord(bytes, &body).ok());
  EXPECT_EQ(std::get<StepRecord>(body), step);

  EventRecord event{.step = 4, .kind = EventKind::kRolledBack, .host_time_ns = 11,
                    .payload = std::string(kMaxEventPayload, 'x')};
  EncodeEvent(event, bytes);
  SealRecord(bytes);
  ASSERT_TRUE(DecodeRecord(bytes, &body).ok());
  EXPECT_EQ(std::get<EventRecord>(body), event);

  NameChunk chunk{.name_id = 3, .total_length = 200, .chunk_offset = 108,
                  .bytes = std::string(92, 'n')};
  EncodeNameChunk(chunk, bytes);
  SealRecord(bytes);
  ASSERT_TRUE(DecodeRecord(bytes, &body).ok());
  EXPECT_EQ(std::get<NameChunk>(body), chunk);
}

// Re-seals after `mutate` so that only the field check can catch it.
Status DecodeMutated(const BoundaryRecord& b, void (*mutate)(uint8_t*)) {
  uint8_t bytes[kRecordSize];
  EncodeBoundary(b, bytes);
  mutate(bytes);
  SealRecord(bytes);
  RecordBody body;
  return DecodeRecord(bytes, &body);
}

TEST(Record, FieldChecksBeyondCrc) {
  BoundaryRecord b = SampleBoundary(0, 0, 0);
  EXPECT_TRUE(DecodeMutated(b, [](uint8_t*) {}).ok());
  Status s = DecodeMutated(b, [](uint8_t* p) { p[0] = 9; });
  EXPECT_NE(s.message().find("unknown record type 9"), std::string::npos) << s.message();
  s = DecodeMutated(b, [](uint8_t* p) { p[1] = 5; });
  EXPECT_NE(s.message().find("unknown phase"), std::string::npos);
  s = DecodeMutated(b, [](uint8_t* p) { p[2] = 2; });
  EXPECT_NE(s.message().find("unknown direction"), std::string::npos);
  s = DecodeMutated(b, [](uint8_t* p) { p[3] = 200; });
  EXPECT_NE(s.message().find("unknown dtype"), std::string::npos);
  s = DecodeMutated(b, [](uint8_t* p) { p[30] = 1; });
  EXPECT_NE(s.message().find("reserved"), std::string::npos);
  s = DecodeMutated(b, [](uint8_t* p) { p[100] = 1; });  // dims slot 3 with ndim 2
  EXPECT_NE(s.message().find("unused shape slot"), std::string::npos);

  uint8_t bytes[kRecordSize];
  EncodeBoundary(b, bytes);
  SealRecord(bytes);
  bytes[50] ^= 0x10;
  RecordBody body;
  EXPECT_EQ(DecodeRecord(bytes, &body).message(), "CRC mismatch");
}

TEST(Record, LongShapeKeepsADigest) {
  std::vector<uint64_t> dims = {2, 3, 4, 5, 6, 7, 8};
  BoundaryRecord b;
  ASSERT_TRUE(SetShape(&b, dims.data(), dims.size()).ok());
  EXPECT_EQ(b.ndim, 7);
  EXPECT_EQ(b.dims[4], 6u);
  EXPECT_EQ(b.dims[5], ShapeDigest(dims.data(), dims.size()));
  dims[6] = 9;
  EXPECT_NE(b.dims[5], ShapeDigest(dims.data(), dims.size()));
  std::vector<uint64_t> huge(256, 1);
  EXPECT_TRUE(SetShape(&b, huge.data(), huge.size()).IsInvalidArgument());
}

// The worked example of docs/trace-format.md, byte for byte: any change to
// the encoding shows up here and needs a new format version.
TEST(Record, WorkedExampleOfTheSpec) {
  TraceHeader h;
  for (int i = 0; i < 16; ++i) h.run_id[i] = static_cast<uint8_t>(i);
  h.seed = 42;
  h.rank = 0;
  h.world_size = 1;
  h.config_digest = 0xc0ffee0000000001ull;
  h.env_digest = 0xe0e0e0e000000002ull;
  h.created_unix_ns = 1763780400000000000ull;
  BoundaryRecord b;
  b.step = 0;
  b.seq = 0;
  b.name_id = 0;
  b.phase = Phase::kForward;
  b.direction = Direction::kOutput;
  b.dtype = DType::kF32;
  const uint64_t dims[] = {4, 8};
  ASSERT_TRUE(SetShape(&b, dims, 2).ok());
  b.byte_count = 128;
  b.example_count = 4;
  b.xor64 = 0x1111222233334444ull;
  b.xxh3 = 0x5555666677778888ull;
  b.host_time_ns = 1763780400000001000ull;
  StepRecord end{.step = 0, .kind = StepKind::kEnd, .host_time_ns = 1763780400000002000ull,
                 .loss_dtype = DType::kF32, .loss_bits = FloatBits(1.5f),
                 .params_xor64 = 0xaaaabbbbccccddddull, .params_xxh3 = 0x0123456789abcdefull};

  uint8_t bytes[kHeaderSize + 3 * kRecordSize];
  EncodeHeader(h, bytes);
  EncodeNameChunk({.name_id = 0, .total_length = 7, .chunk_offset = 0, .bytes = "fc1.out"},
                  bytes + RecordOffset(0));
  EncodeBoundary(b, bytes + RecordOffset(1));
  EncodeStep(end, bytes + RecordOffset(2));
  for (int i = 0; i < 3; ++i) SealRecord(bytes + RecordOffset(i));
  const std::string expected =
      "4447525254524143010000008000000080000000000000000001020304050607"
      "08090a0b0c0d0e0f2a0000000000000000000000010000000100000000eeffc0"
      "02000000e0e0e0e000e0cbcbed347a1800000000000000000000000000000000"
      "00000000000000000000000000000000000000000000000000000000344574d1"
      "010000000000000007000000070000006663312e6f7574000000000000000000"
      "0000000000000000000000000000000000000000000000000000000000000000"
      "0000000000000000000000000000000000000000000000000000000000000000"
      "000000000000000000000000000000000000000000000000000000000866fbda"
      "0201010100000000000000000000000000000000000000000000000002000000"
      "8000000000000000444433332222111188887777666655550000000000000000"
      "04000000e8e3cbcbed347a180400000000000000080000000000000000000000"
      "000000000000000000000000000000000000000000000000000000005526d2d7"
      "03010100000000000000000000000000d0e7cbcbed347a180000c03f00000000"
      "ddddccccbbbbaaaaefcdab896745230100000000000000000000000000000000"
      "0000000000000000000000000000000000000000000000000000000000000000"
      "00000000000000000000000000000000000000000000000000000000000f2c67";
  EXPECT_EQ(Hex(bytes, sizeof bytes), expected);
}

// docs/trace-format.md §3.2: the digest of a shape of more than six
// dimensions is XXH3-64 with seed 0 of the dims as consecutive little-endian
// u64, stored little-endian in the last slot.
TEST(Record, LongShapeDigestIsXxh3OfTheLittleEndianDims) {
  const uint64_t dims[] = {2, 1, 1, 1, 1, 1, 3};
  uint8_t bytes[8 * 7] = {};
  for (size_t i = 0; i < 7; ++i) bytes[8 * i] = static_cast<uint8_t>(dims[i]);  // each < 256
  EXPECT_EQ(ShapeDigest(dims, 7), XXH3_64bits_withSeed(bytes, sizeof bytes, 0));
  EXPECT_EQ(ShapeDigest(dims, 7), 0x95e3d315106f4114ull);  // pinned: the spec's worked example 2
  BoundaryRecord r;
  ASSERT_TRUE(SetShape(&r, dims, 7).ok());
  EXPECT_EQ(r.ndim, 7);
  EXPECT_EQ(r.dims[4], 1u);
  EXPECT_EQ(r.dims[5], ShapeDigest(dims, 7));
  uint8_t record[kRecordSize];
  EncodeBoundary(r, record);
  EXPECT_EQ(DecodeFixed64(record + 76 + 40), r.dims[5]);  // slot 5 at offset 116
}

TEST(Record, Names) {
  EXPECT_EQ(PhaseName(Phase::kCollective), "collective");
  EXPECT_EQ(DirectionName(Direction::kInput), "input");
  EXPECT_EQ(EventKindName(EventKind::kSdcMismatch), "sdc_mismatch");
  EXPECT_EQ(RecordTypeName(RecordType::kStep), "step");
}

}  // namespace
}  // namespace dgrr::trace
