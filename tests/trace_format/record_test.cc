// Record and header encodings: round trips, pinned byte positions, and the
// field checks the decoder makes beyond the CRC.
#include "trace_format/record.h"

#include <gtest/gtest.h>
#include <xxhash.h>

#include <cstring>
#include <iostream>
#include <random>
#include <string>
#include <vector>

#include "base/coding.h"
#include "trace_format/boundary_scan.h"
#include "trace_format/crc32c.h"
#include "tests/trace_format/sample_trace.h"

namespace dgrr::trace {
namespace {

using testing::SampleBoundary;

// The computed CRC of each record's covered bytes, through the portable path.
void ValueOfBlocksForTest(const uint8_t* records, size_t count, uint32_t* crcs) {
  for (size_t i = 0; i < count; ++i) crcs[i] = crc32c::ExtendPortable(0, records + i * kRecordSize, kRecordCrcOffset);
}
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

// The reader's scan uses BoundaryFieldsValid (SSE2 on x86-64); it must say
// exactly what the rule-by-rule definition says, and what the decoder says.
TEST(Record, BoundaryFieldChecksAgreeWithTheirDefinition) {
  std::mt19937_64 rng(124);
  uint64_t accepted = 0, rejected = 0;
  for (int trial = 0; trial < 20000; ++trial) {
    BoundaryRecord b = SampleBoundary(trial % 7, trial, static_cast<uint32_t>(trial % 3));
    b.ndim = static_cast<uint8_t>(trial % 9);
    for (size_t i = 0; i < kInlineDims; ++i) b.dims[i] = i < b.ndim ? 1 + rng() % 1000 : 0;
    uint8_t bytes[kRecordSize];
    EncodeBoundary(b, bytes);
    // One to three bytes changed, most of them where a rule looks: the
    // checked bytes, the reserved ones, every shape slot and ndim.
    const int changes = 1 + static_cast<int>(rng() % 3);
    for (int c = 0; c < changes && trial % 5 != 0; ++c) {
      static constexpr size_t kWatched[] = {0, 1, 2, 3, 28, 29, 30, 31};
      const size_t at = rng() % 2 ? kWatched[rng() % 8] : 76 + rng() % 48;
      bytes[at] = static_cast<uint8_t>(rng() % 4 == 0 ? 0 : rng());
    }
    const bool valid = BoundaryFieldsValid(bytes);
    ASSERT_EQ(valid, BoundaryFieldsValidPortable(bytes)) << "trial " << trial;
    RecordBody body;
    const bool decodes = DecodeRecordFields(bytes, &body).ok() && std::holds_alternative<BoundaryRecord>(body);
    if (bytes[0] == static_cast<uint8_t>(RecordType::kBoundary)) {
      ASSERT_EQ(valid, decodes) << "trial " << trial;
    }
    (valid ? accepted : rejected) += 1;
  }
  EXPECT_GT(accepted, 3000u);  // both outcomes well exercised
  EXPECT_GT(rejected, 3000u);
}

// The reader's run scan (boundary_scan.h), one test instance per kernel:
// those this CPU cannot run are skipped and say why; each one it can run must
// give the portable kernel's run length and sequence state, on runs of clean
// boundaries broken anywhere by a changed byte, a CRC that does not match, a
// name id or rank at or past its limit, or a sequence number that does not
// rise.
class ScanKernelTest : public ::testing::TestWithParam<ScanKernel> {
 protected:
  void SetUp() override {
    if (!ScanKernelAvailable(GetParam())) {
      GTEST_SKIP() << "scan kernel " << ScanKernelName(GetParam()) << " needs "
                   << (GetParam() == ScanKernel::kAvx2 ? "an x86-64 CPU with AVX2" : "an x86-64 build")
                   << "; this CPU or build lacks it";
    }
  }
};

INSTANTIATE_TEST_SUITE_P(Record, ScanKernelTest,
                         ::testing::Values(ScanKernel::kPortable, ScanKernel::kSse2, ScanKernel::kAvx2),
                         [](const ::testing::TestParamInfo<ScanKernel>& info) {
                           return std::string(ScanKernelName(info.param));
                         });

TEST_P(ScanKernelTest, AgreesWithThePortableKernel) {
  constexpr size_t kRun = 40;
  std::mt19937_64 rng(20250);
  uint64_t full_runs = 0, cut_runs = 0;
  for (int trial = 0; trial < 4000; ++trial) {
    std::vector<uint8_t> bytes(kRun * kRecordSize);
    std::vector<uint32_t> crcs(kRun);
    const uint32_t names = static_cast<uint32_t>(trial % 5);  // 0: no boundary can be clean
    const uint32_t world = 1 + static_cast<uint32_t>(trial % 3);
    for (size_t i = 0; i < kRun; ++i) {
      BoundaryRecord b = SampleBoundary(names == 0 ? 0 : static_cast<uint32_t>(rng() % names), i / 8,
                                        100 + 3 * i);
      b.rank = static_cast<uint32_t>(rng() % world);
      b.ndim = static_cast<uint8_t>(rng() % 9);
      for (size_t d = 0; d < kInlineDims; ++d) b.dims[d] = d < b.ndim ? 1 + rng() % 1000 : 0;
      EncodeBoundary(b, bytes.data() + i * kRecordSize);
    }
    SealRecords(bytes.data(), kRun);
    // At most one fault, at a random record; some trials none.
    const size_t at = rng() % kRun;
    uint8_t* p = bytes.data() + at * kRecordSize;
    switch (trial % 8) {
      case 0: break;
      case 1: p[rng() % kRecordCrcOffset] ^= static_cast<uint8_t>(1 + rng() % 255); break;  // CRC fails
      case 2: {  // a watched byte changed, CRC resealed
        static constexpr size_t kWatched[] = {0, 1, 2, 3, 28, 29, 30, 31};
        const size_t where = rng() % 2 ? kWatched[rng() % 8] : 76 + rng() % 48;
        p[where] = static_cast<uint8_t>(rng() % 4 == 0 ? 0 : rng());
        SealRecord(p);
        break;
      }
      case 3: EncodeFixed32(p + boundary_layout::kNameId, names + static_cast<uint32_t>(rng() % 2)); SealRecord(p); break;
      case 4: EncodeFixed32(p + boundary_layout::kRank, world + static_cast<uint32_t>(rng() % 2)); SealRecord(p); break;
      case 5: EncodeFixed64(p + boundary_layout::kSeq, at == 0 ? 0 : 100 + 3 * (at - 1)); SealRecord(p); break;
      case 6: EncodeFixed32(p + boundary_layout::kNameId, 0xffffffffu - static_cast<uint32_t>(rng() % 2)); SealRecord(p); break;
      case 7: p[boundary_layout::kNdim] = static_cast<uint8_t>(rng()); SealRecord(p); break;
    }
    ValueOfBlocksForTest(bytes.data(), kRun, crcs.data());
    for (bool has_seq : {false, true}) {
      const uint64_t last_seq = has_seq ? 99 + rng() % 3 : 0;  // 101 stops the first record
      ScanState expected{names, world, has_seq, last_seq};
      ScanState got = expected;
      const size_t n_expected = CleanBoundaryRunWith(ScanKernel::kPortable, bytes.data(), crcs.data(), kRun, &expected);
      const size_t n_got = CleanBoundaryRunWith(GetParam(), bytes.data(), crcs.data(), kRun, &got);
      ASSERT_EQ(n_got, n_expected) << "trial " << trial;
      ASSERT_EQ(got.has_seq, expected.has_seq) << "trial " << trial;
      ASSERT_EQ(got.last_seq, expected.last_seq) << "trial " << trial;
      (n_expected == kRun ? full_runs : cut_runs) += 1;
    }
  }
  EXPECT_GT(full_runs, 500u);  // both outcomes well exercised
  EXPECT_GT(cut_runs, 500u);
}

TEST(Record, TheSelectedScanKernelIsTheBestAvailable) {
  const ScanKernel selected = SelectedScanKernel();
  EXPECT_TRUE(ScanKernelAvailable(selected));
  if (selected != ScanKernel::kAvx2) EXPECT_FALSE(ScanKernelAvailable(ScanKernel::kAvx2));
  std::cout << "[ INFO     ] selected scan kernel: " << ScanKernelName(selected) << "\n";
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

// docs/trace-format.md §7.2: a repeated key (two micro-batches over the same
// examples), a NAME defined long before its first use, a gap in seq, a
// seven-dimensional shape with its digest and an f16 loss.
std::string WorkedExample2Bytes() {
  TraceHeader h;
  for (int i = 0; i < 16; ++i) h.run_id[i] = static_cast<uint8_t>(0x10 + i);
  h.seed = 7;
  h.rank = 1;
  h.world_size = 2;
  h.config_digest = 0xc0ffee0000000003ull;
  h.env_digest = 0xe0e0e0e000000004ull;
  h.created_unix_ns = 1763780400000000000ull;
  BoundaryRecord attn;
  attn.step = 3;
  attn.seq = 40;
  attn.name_id = 0;
  attn.phase = Phase::kForward;
  attn.direction = Direction::kOutput;
  attn.dtype = DType::kBF16;
  attn.rank = 1;
  const uint64_t attn_dims[] = {2, 4};
  EXPECT_TRUE(SetShape(&attn, attn_dims, 2).ok());
  attn.byte_count = 16;
  attn.first_example = 12;
  attn.example_count = 4;
  attn.xor64 = 0x1111111111111111ull;
  attn.xxh3 = 0x2222222222222222ull;
  attn.host_time_ns = 1763780400000002000ull;
  BoundaryRecord attn2 = attn;  // the second micro-batch: same key, its own tensor
  attn2.seq = 41;
  attn2.xor64 = 0x3333333333333333ull;
  attn2.xxh3 = 0x4444444444444444ull;
  attn2.host_time_ns = 1763780400000003000ull;
  BoundaryRecord mlp = attn;
  mlp.seq = 43;  // 42 was not recorded: gaps are allowed
  mlp.name_id = 1;
  mlp.dtype = DType::kF32;
  const uint64_t mlp_dims[] = {2, 1, 1, 1, 1, 1, 3};
  EXPECT_TRUE(SetShape(&mlp, mlp_dims, 7).ok());
  mlp.byte_count = 24;
  mlp.xor64 = 0x5555555555555555ull;
  mlp.xxh3 = 0x6666666666666666ull;
  mlp.host_time_ns = 1763780400000004000ull;
  const StepRecord begin{.step = 3, .kind = StepKind::kBegin, .host_time_ns = 1763780400000001000ull};
  const StepRecord end{.step = 3, .kind = StepKind::kEnd, .host_time_ns = 1763780400000005000ull,
                       .loss_dtype = DType::kF16, .loss_bits = 0x3e00,  // 1.5 in f16
                       .params_xor64 = 0x7777777777777777ull, .params_xxh3 = 0x8888888888888888ull};
  uint8_t bytes[kHeaderSize + 7 * kRecordSize];
  EncodeHeader(h, bytes);
  EncodeNameChunk({.name_id = 0, .total_length = 8, .chunk_offset = 0, .bytes = "attn.out"},
                  bytes + RecordOffset(0));
  EncodeNameChunk({.name_id = 1, .total_length = 7, .chunk_offset = 0, .bytes = "mlp.out"},
                  bytes + RecordOffset(1));
  EncodeStep(begin, bytes + RecordOffset(2));
  EncodeBoundary(attn, bytes + RecordOffset(3));
  EncodeBoundary(attn2, bytes + RecordOffset(4));
  EncodeBoundary(mlp, bytes + RecordOffset(5));
  EncodeStep(end, bytes + RecordOffset(6));
  for (int i = 0; i < 7; ++i) SealRecord(bytes + RecordOffset(i));
  return Hex(bytes, sizeof bytes);
}

TEST(Record, WorkedExample2OfTheSpec) {
  const std::string expected =
      "4447525254524143010000008000000080000000000000001011121314151617"
      "18191a1b1c1d1e1f070000000000000001000000020000000300000000eeffc0"
      "04000000e0e0e0e000e0cbcbed347a1800000000000000000000000000000000"
      "000000000000000000000000000000000000000000000000000000004cbbefcd"
      "010000000000000008000000080000006174746e2e6f75740000000000000000"
      "0000000000000000000000000000000000000000000000000000000000000000"
      "0000000000000000000000000000000000000000000000000000000000000000"
      "000000000000000000000000000000000000000000000000000000000830f3de"
      "010000000100000007000000070000006d6c702e6f7574000000000000000000"
      "0000000000000000000000000000000000000000000000000000000000000000"
      "0000000000000000000000000000000000000000000000000000000000000000"
      "000000000000000000000000000000000000000000000000000000008a1cd69e"
      "03000000000000000300000000000000e8e3cbcbed347a180000000000000000"
      "0000000000000000000000000000000000000000000000000000000000000000"
      "0000000000000000000000000000000000000000000000000000000000000000"
      "0000000000000000000000000000000000000000000000000000000031e84bf4"
      "0201010400000000280000000000000003000000000000000100000002000000"
      "1000000000000000111111111111111122222222222222220c00000000000000"
      "04000000d0e7cbcbed347a180200000000000000040000000000000000000000"
      "000000000000000000000000000000000000000000000000000000002ef6a66b"
      "0201010400000000290000000000000003000000000000000100000002000000"
      "1000000000000000333333333333333344444444444444440c00000000000000"
      "04000000b8ebcbcbed347a180200000000000000040000000000000000000000"
      "0000000000000000000000000000000000000000000000000000000052e1dcf7"
      "02010101010000002b0000000000000003000000000000000100000007000000"
      "1800000000000000555555555555555566666666666666660c00000000000000"
      "04000000a0efcbcbed347a180200000000000000010000000000000001000000"
      "000000000100000000000000010000000000000014416f1015d3e39549c73d4d"
      "0301030000000000030000000000000088f3cbcbed347a18003e000000000000"
      "7777777777777777888888888888888800000000000000000000000000000000"
      "0000000000000000000000000000000000000000000000000000000000000000"
      "000000000000000000000000000000000000000000000000000000001ff8b447";
  EXPECT_EQ(WorkedExample2Bytes(), expected);
}

TEST(Record, Names) {
  EXPECT_EQ(PhaseName(Phase::kCollective), "collective");
  EXPECT_EQ(DirectionName(Direction::kInput), "input");
  EXPECT_EQ(EventKindName(EventKind::kSdcMismatch), "sdc_mismatch");
  EXPECT_EQ(RecordTypeName(RecordType::kStep), "step");
}

}  // namespace
}  // namespace dgrr::trace
