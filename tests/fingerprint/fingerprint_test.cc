// Fingerprint definitions (docs/fingerprint.md): known XXH3 answers, the xor64
// lane rule and its relation to OpGuard's 32-bit signature, sensitivity to
// single-bit flips, the XOR blind spots that xxh3 covers, and the streaming
// rule.
#include "fingerprint/fingerprint.h"

#include <gtest/gtest.h>

#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "base/cpu_isa.h"
#include "fingerprint/fingerprint_simd.h"
#include "tests/support/upper_vector_state.h"

namespace dgrr {
namespace {

// xxHash's "sanity buffer" described in tests/data/xxh3.txt.
std::vector<uint8_t> SanityBuffer(size_t size) {
  constexpr uint64_t kPrime32 = 2654435761u;
  constexpr uint64_t kPrime64 = 11400714785074694797ull;
  std::vector<uint8_t> buf(size);
  uint64_t generator = kPrime32;
  for (size_t i = 0; i < size; ++i) {
    buf[i] = static_cast<uint8_t>(generator >> 56);
    generator *= kPrime64;
  }
  return buf;
}

std::vector<uint8_t> RandomBytes(size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<uint8_t> v(n);
  for (auto& b : v) b = static_cast<uint8_t>(rng());
  return v;
}

struct Vector {
  size_t len;
  uint64_t expected;
  std::string line;
};

// Rows "XXH3_64bits_withSeed|len=N|seed=0x0000000000000000|0xHASH" (seed 0).
std::vector<Vector> LoadSeedZeroVectors() {
  std::ifstream in(std::string(DGRR_TEST_DATA_DIR) + "/xxh3.txt");
  std::vector<Vector> vectors;
  std::string line;
  const std::string prefix = "XXH3_64bits_withSeed|len=";
  while (std::getline(in, line)) {
    if (line.rfind(prefix, 0) != 0) continue;
    std::vector<std::string> fields;
    std::stringstream ss(line);
    for (std::string f; std::getline(ss, f, '|');) fields.push_back(f);
    if (fields.size() != 4 || fields[2] != "seed=0x0000000000000000") continue;
    vectors.push_back(
        {std::stoull(fields[1].substr(4)), std::stoull(fields[3], nullptr, 16), line});
  }
  return vectors;
}

// The streaming file hash (executables, checkpoint payloads) equals the
// one-shot hash of the same bytes, across its 1 MiB read pieces and from an
// offset.
TEST(Xxh3Test, OfAFileEqualsOfItsBytesFromAnyOffset) {
  const std::string path = ::testing::TempDir() + "/dgrr_xxh3_of_file." + std::to_string(::getpid());
  std::vector<uint8_t> bytes((size_t{1} << 20) * 2 + 777);
  std::mt19937_64 gen(5);
  for (auto& b : bytes) b = static_cast<uint8_t>(gen());
  {
    std::ofstream out(path, std::ios::binary);
    out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  }
  auto file = dgrr::FileSystem::Default()->NewRandomAccessFile(path);
  ASSERT_TRUE(file.ok()) << file.status().ToString();
  for (uint64_t from : {uint64_t{0}, uint64_t{512}, uint64_t{1} << 20, uint64_t{bytes.size()}}) {
    uint64_t end = 0;
    auto hash = dgrr::Xxh3OfFile(**file, from, &end);
    ASSERT_TRUE(hash.ok()) << hash.status().ToString();
    EXPECT_EQ(*hash, dgrr::Xxh3(bytes.data() + from, bytes.size() - from)) << "from " << from;
    EXPECT_EQ(end, bytes.size());
  }
  std::remove(path.c_str());
}

TEST(Xxh3Test, MatchesPublishedSeedZeroVectors) {
  const std::vector<Vector> vectors = LoadSeedZeroVectors();
  ASSERT_GE(vectors.size(), 14u) << "tests/data/xxh3.txt missing or unparsed";
  const std::vector<uint8_t> buf = SanityBuffer(2367);
  ASSERT_EQ(buf[1], 0x52);  // the file's stated first bytes
  ASSERT_EQ(buf[15], 0x93);
  for (const Vector& v : vectors) {
    ASSERT_LE(v.len, buf.size()) << v.line;
    EXPECT_EQ(Xxh3(buf.data(), v.len), v.expected) << v.line;
    EXPECT_EQ(FingerprintBytes(buf.data(), v.len).xxh3, v.expected) << v.line;
    // The streaming state three ways: one update, byte by byte, 7-byte steps.
    Fingerprinter whole;
    whole.Update(buf.data(), v.len);
    EXPECT_EQ(whole.Digest().xxh3, v.expected) << v.line;
    Fingerprinter bytewise;
    for (size_t i = 0; i < v.len; ++i) bytewise.Update(buf.data() + i, 1);
    EXPECT_EQ(bytewise.Digest().xxh3, v.expected) << v.line;
    Fingerprinter sevens;
    for (size_t i = 0; i < v.len; i += 7)
      sevens.Update(buf.data() + i, std::min<size_t>(7, v.len - i));
    EXPECT_EQ(sevens.Digest().xxh3, v.expected) << v.line;
  }
}

TEST(Xxh3Test, MatchesPublishedStrings) {
  EXPECT_EQ(Xxh3("", 0), 0x2D06800538D394C2ull);
  EXPECT_EQ(Xxh3("a", 1), 0xE6C632B61E964E1Full);
  EXPECT_EQ(Xxh3("abc", 3), 0x78AF5F94892F3950ull);
  EXPECT_EQ(Xxh3("123456789", 9), 0x72DCB18B67A17DFFull);
  const std::string fox = "The quick brown fox jumps over the lazy dog";
  EXPECT_EQ(Xxh3(fox.data(), fox.size()), 0xCE7D19A5418FB365ull);
}

// xor64 straight from its definition, byte by byte.
uint64_t ReferenceXor64(const uint8_t* p, size_t n) {
  uint64_t acc = 0;
  for (size_t i = 0; i < n; ++i) acc ^= static_cast<uint64_t>(p[i]) << (8 * (i % 8));
  return acc;
}

// OpGuard's signature as that paper defines it: XOR of little-endian 32-bit
// words, the last partial word zero-padded.
uint32_t ReferenceXorSignature32(const uint8_t* p, size_t n) {
  uint32_t acc = 0;
  for (size_t i = 0; i < n; i += 4) {
    uint32_t word = 0;
    for (size_t k = 0; k < 4 && i + k < n; ++k) word |= static_cast<uint32_t>(p[i + k]) << (8 * k);
    acc ^= word;
  }
  return acc;
}

TEST(Xor64Test, KnownValues) {
  const uint8_t bytes[9] = {0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07, 0x08, 0xF0};
  EXPECT_EQ(Xor64(bytes, 0), 0u);
  EXPECT_EQ(Xor64(bytes, 1), 0x01u);
  EXPECT_EQ(Xor64(bytes, 8), 0x0807060504030201ull);
  // The 9th byte starts a new word, zero-padded: it lands in lane 0.
  EXPECT_EQ(Xor64(bytes, 9), 0x0807060504030201ull ^ 0xF0u);
}

TEST(Xor64Test, SignatureEqualsOpGuard32ForEveryLengthUpTo67) {
  const std::vector<uint8_t> buf = RandomBytes(67, 1);
  for (size_t n = 0; n <= 67; ++n) {
    const uint64_t x = Xor64(buf.data(), n);
    EXPECT_EQ(x, ReferenceXor64(buf.data(), n)) << "n=" << n;
    EXPECT_EQ(XorSignature32(x), ReferenceXorSignature32(buf.data(), n)) << "n=" << n;
  }
}

TEST(Xor64Test, OddLengthsAgainstDefinition) {
  const std::vector<uint8_t> buf = RandomBytes(5000, 2);
  for (size_t n : {1, 3, 7, 9, 15, 63, 65, 127, 129, 511, 513, 1023, 1025, 4095, 4097, 4999}) {
    EXPECT_EQ(Xor64(buf.data(), n), ReferenceXor64(buf.data(), n)) << "n=" << n;
    EXPECT_EQ(FingerprintBytes(buf.data(), n).xor64, ReferenceXor64(buf.data(), n)) << "n=" << n;
  }
}

TEST(FingerprintTest, EmptyInput) {
  const Fingerprint empty = FingerprintBytes(nullptr, 0);
  EXPECT_EQ(empty.xor64, 0u);
  EXPECT_EQ(empty.xxh3, 0x2D06800538D394C2ull);
  Fingerprinter f;
  f.Update(nullptr, 0);
  EXPECT_EQ(f.Digest(), empty);
  EXPECT_EQ(f.bytes(), 0u);
}

TEST(FingerprintTest, FusedEqualsSeparatePasses) {
  const size_t chunk = fingerprint_internal::kFusedChunkBytes;
  const std::vector<uint8_t> buf = RandomBytes(3 * chunk + 100, 3);
  // 4095/4096/4097: either side of FingerprintBytes' switch to the single pass.
  for (size_t n : {size_t{0}, size_t{5}, size_t{240}, size_t{241}, size_t{4095}, size_t{4096},
                   size_t{4097}, size_t{8191}, size_t{8192}, size_t{8193}, chunk - 1, chunk,
                   chunk + 1, 2 * chunk + 3, buf.size()}) {
    const Fingerprint fused = FingerprintBytes(buf.data(), n);
    EXPECT_EQ(fused.xor64, Xor64(buf.data(), n)) << "n=" << n;
    EXPECT_EQ(fused.xor64, ReferenceXor64(buf.data(), n)) << "n=" << n;
    EXPECT_EQ(fused.xxh3, Xxh3(buf.data(), n)) << "n=" << n;
  }
}

// FingerprintBytes against the two separate definitions for every length
// through two blocks and past, both routes (AVX2 single pass where the CPU has
// it, libxxhash chunks everywhere).
TEST(FingerprintTest, EveryLengthUpTo2200MatchesSeparatePasses) {
  const std::vector<uint8_t> buf = RandomBytes(2200, 15);
  for (size_t n = 0; n <= buf.size(); ++n) {
    const Fingerprint expected{ReferenceXor64(buf.data(), n), Xxh3(buf.data(), n)};
    ASSERT_EQ(FingerprintBytes(buf.data(), n), expected) << "n=" << n;
    ASSERT_EQ(fingerprint_internal::FingerprintBytesChunked(buf.data(), n, 256), expected)
        << "n=" << n;
  }
}

// Every stripe consumer this machine can run, against libxxhash and the XOR
// definition: lengths over blocks and block boundaries, aligned and not. The
// list is the library's own, so a consumer added there is tested here; the
// check below makes sure a CPU's fastest consumers are really in it.
std::vector<fingerprint_internal::NamedStripeConsumer> Consumers() {
  return fingerprint_internal::AvailableStripeConsumers();
}

TEST(FingerprintTest, EveryConsumerThisCpuCanRunIsListed) {
  std::vector<std::string> names;
  for (const auto& consumer : Consumers()) names.emplace_back(consumer.name);
  std::vector<std::string> expected = {"scalar"};
#if defined(__x86_64__) && defined(__GNUC__)
  expected.push_back("sse2");
  // DGRR_MAX_ISA (base/cpu_isa.h) may cap what the dispatcher lists.
  if (__builtin_cpu_supports("avx2") && IsaAllowed(IsaLevel::kAvx2)) expected.push_back("avx2");
  if (__builtin_cpu_supports("avx512f") && IsaAllowed(IsaLevel::kAvx512)) expected.push_back("avx512");
#endif
  EXPECT_EQ(names, expected);
  EXPECT_EQ(std::string(fingerprint_internal::BestStripeConsumerName()), expected.back());
}

// The benchmarks name the consumers' prefetch plans; auto resolves to one
// that runs (near on AMD, far elsewhere), never to itself.
TEST(FingerprintTest, PrefetchPlansParseByNameAndAutoResolves) {
  using fingerprint_internal::PrefetchPlan;
  for (PrefetchPlan plan : {PrefetchPlan::kAuto, PrefetchPlan::kNone, PrefetchPlan::kNear, PrefetchPlan::kNearPaced,
                            PrefetchPlan::kFar}) {
    PrefetchPlan parsed = PrefetchPlan::kNone;
    ASSERT_TRUE(fingerprint_internal::ParsePrefetchPlan(fingerprint_internal::PrefetchPlanName(plan), &parsed));
    EXPECT_EQ(parsed, plan);
    fingerprint_internal::SetPrefetchPlan(plan);
    if (plan != PrefetchPlan::kAuto) EXPECT_EQ(fingerprint_internal::CurrentPrefetchPlan(), plan);
  }
  fingerprint_internal::SetPrefetchPlan(PrefetchPlan::kAuto);
  const PrefetchPlan resolved = fingerprint_internal::CurrentPrefetchPlan();
  EXPECT_TRUE(resolved == PrefetchPlan::kNear || resolved == PrefetchPlan::kFar);
  PrefetchPlan unchanged = PrefetchPlan::kNone;
  EXPECT_FALSE(fingerprint_internal::ParsePrefetchPlan("nearest", &unchanged));
  EXPECT_FALSE(fingerprint_internal::ParsePrefetchPlan(nullptr, &unchanged));
  EXPECT_EQ(unchanged, PrefetchPlan::kNone);
}

TEST(FingerprintTest, EveryStripeConsumerMatchesLibxxhash) {
  const std::vector<uint8_t> data = RandomBytes((5 << 19) + 64, 16);
  std::vector<uint8_t> storage(data.size() + 8);
  std::copy(data.begin(), data.end(), storage.begin() + 3);  // misaligned copy
  // Whole blocks go through the AVX-512 consumer in interleaved pairs: an odd
  // count leaves one block after the pairs (3073: one pair and one; 5121; and
  // 1 MiB - 1023 with the pairs prefetching on AMD), an even count none.
  // From 2 MiB the consumers on other CPUs prefetch far ahead into L2
  // (kFarPrefetchMinBytes): 2 MiB - 1, 2 MiB + 1025 and the whole buffer.
  std::vector<size_t> lengths = {1023, 1024,       1025,          1088,
                                 1089, 2048,       2049,          3073,
                                 4096, 4097,       5121,          65536 + 63,
                                 65536 + 1024 + 1, (1 << 20) - 1023, (1 << 20) + 1,
                                 (2 << 20) - 1, (2 << 20) + 1025, data.size()};
  for (size_t n = 241; n <= 1100; ++n) lengths.push_back(n);
  using fingerprint_internal::PrefetchPlan;
  for (const auto& [name, consume] : Consumers()) {
    // Every software prefetch the consumers can issue: the same bits.
    for (PrefetchPlan plan : {PrefetchPlan::kAuto, PrefetchPlan::kNone, PrefetchPlan::kNear,
                              PrefetchPlan::kNearPaced, PrefetchPlan::kFar}) {
      fingerprint_internal::SetPrefetchPlan(plan);
      const std::string what = std::string(name) + " prefetch " + fingerprint_internal::PrefetchPlanName(plan);
      for (size_t n : lengths) {
        const Fingerprint expected{Xor64(data.data(), n), Xxh3(data.data(), n)};
        ASSERT_EQ(fingerprint_internal::FingerprintLong(data.data(), n, consume), expected) << what << " n=" << n;
        ASSERT_EQ(fingerprint_internal::FingerprintLong(storage.data() + 3, n, consume), expected)
            << what << " misaligned n=" << n;
      }
    }
    fingerprint_internal::SetPrefetchPlan(PrefetchPlan::kAuto);
  }
  EXPECT_NE(std::string(fingerprint_internal::BestStripeConsumerName()), "");
}

// One test instance per stripe consumer the library has: those this CPU or
// build cannot run are skipped and say why; each one it can run must give the
// portable (scalar) consumer's state, stripe by stripe, in one call and in
// pieces that start mid-block, over lengths around the block and prefetch
// boundaries.
class StripeConsumerTest : public ::testing::TestWithParam<const char*> {
 protected:
  void SetUp() override {
    for (const auto& consumer : Consumers()) {
      if (std::string(consumer.name) == GetParam()) consume_ = consumer.consume;
    }
    if (consume_ == nullptr) {
      const std::string name = GetParam();
      GTEST_SKIP() << "stripe consumer " << name << " needs "
                   << (name == "avx512" ? "an x86-64 CPU with AVX-512F"
                       : name == "avx2" ? "an x86-64 CPU with AVX2"
                                        : "an x86-64 build")
                   << "; this CPU or build lacks it";
    }
  }
  fingerprint_internal::StripeConsumer consume_ = nullptr;
};

INSTANTIATE_TEST_SUITE_P(Fingerprint, StripeConsumerTest,
                         ::testing::Values("scalar", "sse2", "avx2", "avx512"),
                         [](const ::testing::TestParamInfo<const char*>& info) {
                           return std::string(info.param);
                         });

TEST_P(StripeConsumerTest, AgreesWithThePortableConsumer) {
  const std::vector<uint8_t> data = RandomBytes(64 * 3000, 18);
  const uint8_t* secret = fingerprint_internal::DefaultXxh3Secret();
  auto same = [](const fingerprint_internal::StripeState& a, const fingerprint_internal::StripeState& b) {
    return a.xor64 == b.xor64 && a.stripes_in_block == b.stripes_in_block &&
           std::equal(a.acc, a.acc + 8, b.acc);
  };
  for (size_t start : {size_t{0}, size_t{1}, size_t{15}, size_t{16}, size_t{17}}) {
    for (size_t count : {size_t{1}, size_t{15}, size_t{16}, size_t{31}, size_t{32}, size_t{47}, size_t{48},
                         size_t{49}, size_t{64}, size_t{65}, size_t{100}, size_t{1000}, size_t{2900}}) {
      fingerprint_internal::StripeState expected = fingerprint_internal::InitialStripeState();
      fingerprint_internal::StripeState got = expected;
      fingerprint_internal::ConsumeStripesScalar(&expected, data.data(), start, secret);
      consume_(&got, data.data(), start, secret);
      ASSERT_TRUE(same(got, expected)) << "start " << start;
      fingerprint_internal::ConsumeStripesScalar(&expected, data.data() + 64 * start, count, secret);
      consume_(&got, data.data() + 64 * start, count, secret);
      ASSERT_TRUE(same(got, expected)) << "start " << start << " count " << count;
    }
  }
}

// Streaming hands each consumer runs that start mid-block: consuming stripes
// in uneven pieces must equal consuming them in one call.
TEST(FingerprintTest, StripeConsumersResumeMidBlock) {
  const std::vector<uint8_t> data = RandomBytes(64 * 2000, 17);
  const uint8_t* secret = fingerprint_internal::DefaultXxh3Secret();
  for (const auto& [name, consume] : Consumers()) {
    fingerprint_internal::StripeState whole = fingerprint_internal::InitialStripeState();
    consume(&whole, data.data(), 2000, secret);
    fingerprint_internal::StripeState pieces = fingerprint_internal::InitialStripeState();
    size_t done = 0;
    // The last two pieces (56 and 62.5 KiB, starting mid-block) are long
    // enough for the AVX-512 consumer's interleaved pairs of blocks.
    for (size_t piece : {1, 3, 12, 16, 17, 0, 5, 30, 16, 900, 1000}) {
      consume(&pieces, data.data() + 64 * done, piece, secret);
      done += piece;
    }
    ASSERT_EQ(done, 2000u);
    EXPECT_EQ(pieces.xor64, whole.xor64) << name;
    EXPECT_EQ(pieces.stripes_in_block, whole.stripes_in_block) << name;
    for (int lane = 0; lane < 8; ++lane) EXPECT_EQ(pieces.acc[lane], whole.acc[lane]) << name;
  }
}

TEST(FingerprintTest, ChunkSizeDoesNotChangeResult) {
  const std::vector<uint8_t> buf = RandomBytes(70001, 4);
  const Fingerprint expected{ReferenceXor64(buf.data(), buf.size()), Xxh3(buf.data(), buf.size())};
  // 1000 is rounded down to a multiple of 8; 3 is raised to 8.
  for (size_t chunk : {3, 8, 64, 1000, 4096, 16384, 65536, 1 << 20}) {
    EXPECT_EQ(fingerprint_internal::FingerprintBytesChunked(buf.data(), buf.size(), chunk),
              expected)
        << "chunk=" << chunk;
  }
}

TEST(FingerprintTest, MisalignedStartPointers) {
  const std::vector<uint8_t> data = RandomBytes(40000, 5);
  const Fingerprint expected = FingerprintBytes(data.data(), data.size());
  std::vector<uint8_t> storage(data.size() + 64);
  for (size_t shift = 0; shift < 16; ++shift) {
    std::memcpy(storage.data() + shift, data.data(), data.size());
    EXPECT_EQ(FingerprintBytes(storage.data() + shift, data.size()), expected) << "shift=" << shift;
    EXPECT_EQ(Xor64(storage.data() + shift, 1001), Xor64(data.data(), 1001)) << "shift=" << shift;
  }
}

TEST(FingerprintTest, EverySingleBitFlipChangesBothOnSmallBuffer) {
  std::vector<uint8_t> buf = RandomBytes(67, 6);
  const Fingerprint original = FingerprintBytes(buf.data(), buf.size());
  for (size_t bit = 0; bit < 8 * buf.size(); ++bit) {
    buf[bit / 8] ^= static_cast<uint8_t>(1u << (bit % 8));
    const Fingerprint flipped = FingerprintBytes(buf.data(), buf.size());
    EXPECT_NE(flipped.xor64, original.xor64) << "bit " << bit;
    EXPECT_NE(flipped.xxh3, original.xxh3) << "bit " << bit;
    buf[bit / 8] ^= static_cast<uint8_t>(1u << (bit % 8));
  }
  EXPECT_EQ(FingerprintBytes(buf.data(), buf.size()), original);
}

TEST(FingerprintTest, SampledBitFlipsChangeBothOnLargeBuffer) {
  std::vector<uint8_t> buf = RandomBytes((1 << 20) + 3, 7);
  const Fingerprint original = FingerprintBytes(buf.data(), buf.size());
  std::mt19937_64 rng(8);
  std::vector<size_t> bits = {0, 8 * buf.size() - 1, 8 * (buf.size() - 3)};  // ends and tail word
  for (int i = 0; i < 150; ++i) bits.push_back(rng() % (8 * buf.size()));
  for (size_t bit : bits) {
    buf[bit / 8] ^= static_cast<uint8_t>(1u << (bit % 8));
    const Fingerprint flipped = FingerprintBytes(buf.data(), buf.size());
    EXPECT_NE(flipped.xor64, original.xor64) << "bit " << bit;
    EXPECT_NE(flipped.xxh3, original.xxh3) << "bit " << bit;
    buf[bit / 8] ^= static_cast<uint8_t>(1u << (bit % 8));
  }
}

TEST(FingerprintTest, RowSwapIsInvisibleToXorButNotToXxh3) {
  // A 6x16 f32 matrix: rows of 64 bytes, so a swapped row keeps its lanes.
  constexpr size_t kRows = 6, kCols = 16, kRowBytes = kCols * sizeof(float);
  std::vector<float> m(kRows * kCols);
  for (size_t i = 0; i < m.size(); ++i) m[i] = 0.25f * static_cast<float>(i) - 3.0f;
  const Fingerprint original = FingerprintBytes(m.data(), m.size() * sizeof(float));
  std::vector<float> swapped = m;
  std::memcpy(&swapped[1 * kCols], &m[4 * kCols], kRowBytes);
  std::memcpy(&swapped[4 * kCols], &m[1 * kCols], kRowBytes);
  const Fingerprint after = FingerprintBytes(swapped.data(), swapped.size() * sizeof(float));
  EXPECT_EQ(after.xor64, original.xor64) << "the documented blind spot of xor64";
  EXPECT_NE(after.xxh3, original.xxh3);
}

TEST(FingerprintTest, CancellingDoubleCorruptionIsInvisibleToXorButNotToXxh3) {
  std::vector<uint8_t> buf = RandomBytes(4096, 9);
  const Fingerprint original = FingerprintBytes(buf.data(), buf.size());
  // The same bit flipped in two words 8*k bytes apart cancels under XOR.
  buf[100] ^= 0x10;
  buf[100 + 8 * 37] ^= 0x10;
  const Fingerprint after = FingerprintBytes(buf.data(), buf.size());
  EXPECT_EQ(after.xor64, original.xor64);
  EXPECT_NE(after.xxh3, original.xxh3);
  // A duplicated (equal) pair of words XORs to zero wherever it appears.
  std::vector<uint8_t> a(64, 0), b(64, 0);
  std::memset(a.data() + 8, 0xAB, 8);
  std::memset(a.data() + 24, 0xAB, 8);
  EXPECT_EQ(Xor64(a.data(), a.size()), Xor64(b.data(), b.size()));
  EXPECT_NE(Xxh3(a.data(), a.size()), Xxh3(b.data(), b.size()));
}

TEST(FingerprinterTest, EveryTwoWaySplitEqualsOneShot) {
  const std::vector<uint8_t> buf = RandomBytes(300, 10);
  const Fingerprint expected = FingerprintBytes(buf.data(), buf.size());
  for (size_t cut = 0; cut <= buf.size(); ++cut) {
    Fingerprinter f;
    f.Update(buf.data(), cut);
    f.Update(buf.data() + cut, buf.size() - cut);
    EXPECT_EQ(f.Digest(), expected) << "cut=" << cut;
  }
}

TEST(FingerprinterTest, RandomSplitsAcrossChunksEqualOneShot) {
  const std::vector<uint8_t> buf = RandomBytes(3 * fingerprint_internal::kFusedChunkBytes + 11, 11);
  const Fingerprint expected = FingerprintBytes(buf.data(), buf.size());
  std::mt19937_64 rng(12);
  for (int trial = 0; trial < 20; ++trial) {
    Fingerprinter f;
    size_t offset = 0;
    while (offset < buf.size()) {
      // Mostly small odd pieces, sometimes more than a chunk.
      const size_t piece = std::min(buf.size() - offset,
                                    rng() % 4 == 0 ? size_t(rng() % 70000) : size_t(rng() % 17));
      f.Update(buf.data() + offset, piece);
      offset += piece;
    }
    EXPECT_EQ(f.bytes(), buf.size());
    EXPECT_EQ(f.Digest(), expected) << "trial " << trial;
  }
}

TEST(FingerprinterTest, DigestDoesNotChangeStateAndResetRestarts) {
  const std::vector<uint8_t> buf = RandomBytes(1000, 13);
  Fingerprinter f;
  f.Update(buf.data(), 333);
  const Fingerprint partial = f.Digest();
  EXPECT_EQ(f.Digest(), partial);
  EXPECT_EQ(partial, FingerprintBytes(buf.data(), 333));
  f.Update(buf.data() + 333, 667);
  EXPECT_EQ(f.Digest(), FingerprintBytes(buf.data(), 1000));
  f.Reset();
  EXPECT_EQ(f.bytes(), 0u);
  EXPECT_EQ(f.Digest(), FingerprintBytes(nullptr, 0));
  f.Update(buf.data(), 1000);
  EXPECT_EQ(f.Digest(), FingerprintBytes(buf.data(), 1000));
}

TEST(FingerprinterTest, CopiesAreIndependent) {
  const std::vector<uint8_t> buf = RandomBytes(900, 14);
  Fingerprinter a;
  a.Update(buf.data(), 451);
  Fingerprinter b = a;  // copy mid-stream
  a.Update(buf.data() + 451, 449);
  EXPECT_EQ(b.Digest(), FingerprintBytes(buf.data(), 451));
  b.Update(buf.data() + 451, 449);
  EXPECT_EQ(b.Digest(), a.Digest());
  Fingerprinter c;
  c = a;
  c.Update(buf.data(), 1);
  EXPECT_NE(c.Digest(), a.Digest());
  Fingerprinter moved = std::move(c);
  EXPECT_EQ(moved.bytes(), 901u);
}

#if defined(DGRR_HAVE_XINUSE_CHECK)
using test_support::CpuReportsXinuse;
using test_support::kDirtyUpperState;
using test_support::Xinuse;

TEST(FingerprintTest, LeavesTheUpperVectorStateClean) {
  if (!CpuReportsXinuse()) GTEST_SKIP() << "this CPU cannot report XINUSE (xgetbv with ecx=1)";
  std::vector<uint8_t> data(3 << 20);
  std::mt19937_64 rng(17);
  for (auto& b : data) b = static_cast<uint8_t>(rng());
  // Every path: the one-shot hash below 4 KiB (libxxhash's dispatched
  // kernels), the fused single pass above, and the chunked streaming state.
  for (size_t n : {size_t{1}, size_t{64}, size_t{240}, size_t{1000}, size_t{4095}, size_t{4096},
                   size_t{8191}, size_t{8192}, size_t{1} << 20, data.size()}) {
    (void)FingerprintBytes(data.data(), n);
    const uint32_t after_fingerprint = Xinuse();
    (void)Xxh3(data.data(), n);
    const uint32_t after_xxh3 = Xinuse();
    (void)fingerprint_internal::FingerprintBytesChunked(data.data(), n, 64 * 1024);
    const uint32_t after_chunked = Xinuse();
    EXPECT_EQ(after_fingerprint & kDirtyUpperState, 0u) << "FingerprintBytes, n=" << n;
    EXPECT_EQ(after_xxh3 & kDirtyUpperState, 0u) << "Xxh3, n=" << n;
    EXPECT_EQ(after_chunked & kDirtyUpperState, 0u) << "FingerprintBytesChunked, n=" << n;
  }
  // Each stripe consumer on its own (FingerprintBytes runs only the best), and
  // the streaming Fingerprinter, whose updates end inside a consumer.
  for (const auto& consumer : Consumers()) {
    (void)fingerprint_internal::FingerprintLong(data.data(), data.size(), consumer.consume);
    EXPECT_EQ(Xinuse() & kDirtyUpperState, 0u) << consumer.name;
  }
  Fingerprinter streaming;
  streaming.Update(data.data(), data.size() - 5);
  EXPECT_EQ(Xinuse() & kDirtyUpperState, 0u) << "Fingerprinter::Update";
  streaming.Update(data.data(), 5);
  (void)streaming.Digest();
  EXPECT_EQ(Xinuse() & kDirtyUpperState, 0u) << "Fingerprinter::Digest";
}
#endif

}  // namespace
}  // namespace dgrr
