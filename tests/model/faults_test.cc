// The tensor faults of `--inject` (model/faults.h) as pure functions: what
// each writes into an element, that its randomness is a function of the run
// (seed, step, rank, example, element) only, and what a spec may say.
#include "model/faults.h"

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstring>
#include <set>
#include <thread>
#include <vector>

#include "base/coding.h"
#include "model/fault_reducers.h"
#include "runtime/inprocess_communicator.h"

namespace dgrr::model {
namespace {

FaultSpec Spec(const std::string& text) {
  auto spec = ParseFaultSpec(text);
  EXPECT_TRUE(spec.ok()) << text << ": " << spec.status().ToString();
  return spec.ok() ? *spec : FaultSpec{};
}

FlipTarget FloatTarget(uint64_t elements = 100) {
  FlipTarget t;
  t.name = "x";
  t.site = FlipSite::kParameter;  // per batch: no example in the EVENT
  t.elements = elements;
  return t;
}

FlipTarget ByteTarget() {
  FlipTarget t;
  t.name = "data.tokens";
  t.site = FlipSite::kTokens;
  t.elements = 64;
  t.element_bits = 8;
  t.default_bit = 0;
  return t;
}

constexpr uint64_t kSeed = 1234;
const uint32_t kOne = FloatBits(1.0f);  // 0x3f800000

TEST(TensorFaults, EachKindWritesWhatItSays) {
  const FlipTarget f32 = FloatTarget();
  EXPECT_EQ(CorruptElement(Spec("bitflip:step=1,at=x,index=3,bit=4"), f32, kSeed, 0, 3, kOne), kOne ^ 0x10u);
  EXPECT_EQ(CorruptElement(Spec("multibit:step=1,at=x,index=3,bits=0+31"), f32, kSeed, 0, 3, kOne),
            kOne ^ 0x80000001u);
  EXPECT_EQ(CorruptElement(Spec("stuck-byte:step=1,at=x,index=3"), f32, kSeed, 0, 3, kOne), 0xff800000u)
      << "default: the top byte stuck at 0xff";
  EXPECT_EQ(CorruptElement(Spec("stuck-byte:step=1,at=x,index=3,byte=1,value=0x5a"), f32, kSeed, 0, 3, kOne),
            0x3f805a00u);
  EXPECT_EQ(CorruptElement(Spec("stuck-byte:step=1,at=x,index=3,byte=3,value=63"), f32, kSeed, 0, 3, kOne), kOne)
      << "a byte already stuck at its value changes nothing";
  EXPECT_EQ(CorruptElement(Spec("nan:step=1,at=x,index=3"), f32, kSeed, 0, 3, kOne), 0x7fc00000u);
  EXPECT_EQ(CorruptElement(Spec("inf:step=1,at=x,index=3"), f32, kSeed, 0, 3, kOne), 0x7f800000u);
  EXPECT_EQ(CorruptElement(Spec("inf:step=1,at=x,index=3,sign=-"), f32, kSeed, 0, 3, kOne), 0xff800000u);
  // Only the element(s) named change.
  for (const char* text : {"bitflip:step=1,at=x,index=3", "random:step=1,at=x,index=3", "nan:step=1,at=x,index=3",
                           "multibit:step=1,at=x,index=3,elements=2"}) {
    EXPECT_EQ(CorruptElement(Spec(text), f32, kSeed, 0, 2, kOne), kOne) << text;
    EXPECT_EQ(CorruptElement(Spec(text), f32, kSeed, 0, 5, kOne), kOne) << text;
  }
  EXPECT_NE(CorruptElement(Spec("multibit:step=1,at=x,index=3,elements=2"), f32, kSeed, 0, 4, kOne), kOne);
}

TEST(TensorFaults, MultibitDrawsDistinctBitsPerElementFromTheRun) {
  const FlipTarget f32 = FloatTarget();
  const FaultSpec f = Spec("multibit:step=5,rank=1,at=x,index=10,count=5,elements=20");
  std::set<uint32_t> patterns;
  for (uint64_t e = 10; e < 30; ++e) {
    const uint32_t flipped = CorruptElement(f, f32, kSeed, 7, e, kOne) ^ kOne;
    EXPECT_EQ(std::popcount(flipped), 5) << "element " << e;
    EXPECT_EQ(CorruptElement(f, f32, kSeed, 7, e, kOne) ^ kOne, flipped) << "the same every time";
    patterns.insert(flipped);
  }
  EXPECT_GT(patterns.size(), 15u) << "each element draws its own bits";
  // The default is two bits; a byte's bits stay within the byte.
  EXPECT_EQ(std::popcount(CorruptElement(Spec("multibit:step=5,at=x"), f32, kSeed, 0, 0, kOne) ^ kOne), 2);
  const FaultSpec bytes = Spec("multibit:step=5,at=data.tokens,count=8");
  EXPECT_EQ(CorruptElement(bytes, ByteTarget(), kSeed, 0, 0, 0x41), 0x41u ^ 0xffu);
}

TEST(TensorFaults, RandomIsAFunctionOfSeedStepRankExampleAndElement) {
  const FlipTarget f32 = FloatTarget();
  const FaultSpec f = Spec("random:step=5,rank=1,at=x,index=3");
  const uint32_t v = CorruptElement(f, f32, kSeed, 7, 3, kOne);
  EXPECT_NE(v, kOne);
  EXPECT_EQ(CorruptElement(f, f32, kSeed, 7, 3, kOne), v);
  EXPECT_NE(CorruptElement(f, f32, kSeed + 1, 7, 3, kOne), v) << "another seed, another value";
  EXPECT_NE(CorruptElement(f, f32, kSeed, 8, 3, kOne), v) << "another example";
  EXPECT_NE(CorruptElement(Spec("random:step=6,rank=1,at=x,index=3"), f32, kSeed, 7, 3, kOne), v);
  EXPECT_NE(CorruptElement(Spec("random:step=5,rank=0,at=x,index=3"), f32, kSeed, 7, 3, kOne), v);
  // Never the old value: the one draw that equals it is skipped.
  const uint32_t first = CorruptElement(f, f32, kSeed, 7, 3, 0);
  EXPECT_NE(CorruptElement(f, f32, kSeed, 7, 3, first), first);
  // A token gets a byte, never its own.
  for (uint32_t old = 0; old < 256; ++old) {
    const uint32_t b = CorruptElement(Spec("random:step=5,at=data.tokens"), ByteTarget(), kSeed, 0, 0, old);
    EXPECT_LT(b, 256u);
    EXPECT_NE(b, old);
  }
}

TEST(TensorFaults, FiredTextNamesTheChangeFirst) {
  const FlipTarget f32 = FloatTarget();
  const FaultSpec flip = Spec("bitflip:step=1,at=x,index=3,bit=4");
  EXPECT_EQ(FiredText(flip, f32, 8, kOne, kOne ^ 0x10), "bitflip:step=1,at=x,index=3,bit=4 fired: element 3 bit 4");
  EXPECT_EQ(FiredText(Spec("multibit:step=1,at=x,index=3,bits=1+2,elements=4"), f32, 8, kOne, kOne ^ 6),
            "multibit fired: element 3 0x3f800000 -> 0x3f800006 and 3 more (multibit:step=1,at=x,index=3,bits=1+2,"
            "elements=4)");
  EXPECT_EQ(FiredText(Spec("stuck-byte:step=1,at=data.tokens,index=2"), ByteTarget(), 8, 0x41, 0xff),
            "stuck-byte fired: element 2 0x41 -> 0xff of example 8 (stuck-byte:step=1,at=data.tokens,index=2)");
}

TEST(TensorFaults, SpecsSayWhatTheyMean) {
  for (const char* bad : {"multibit:step=1,at=x,bits=3+3", "multibit:step=1,at=x,bits=32", "multibit:step=1,at=x,bits=",
                          "multibit:step=1,at=x,bits=1+2,count=2", "multibit:step=1,at=x,count=0",
                          "multibit:step=1,at=x,elements=0", "multibit:step=1,at=x,bit=3",
                          "stuck-byte:step=1,at=x,byte=4", "stuck-byte:step=1,at=x,value=256",
                          "stuck-byte:step=1,at=x,value=0xfff", "stuck-byte:step=1,at=x,value=0x",
                          "inf:step=1,at=x,sign=x", "nan:step=1,at=x,sign=-", "random:step=1", "nan:at=x",
                          "random:step=1,at=x,bit=3"}) {
    EXPECT_FALSE(ParseFaultSpec(bad).ok()) << bad;
  }
  const FaultSpec m = Spec("multibit:step=2,rank=1,at=x,example=9,index=4,bits=30+1+7,elements=3");
  EXPECT_EQ(m.kind, FaultKind::kMultibit);
  EXPECT_EQ(m.bits, (std::vector<int>{30, 1, 7}));
  EXPECT_FALSE(m.count.has_value());
  EXPECT_EQ(m.elements, 3u);
  EXPECT_EQ(*m.example, 9u);
  EXPECT_EQ(Spec("stuck-byte:step=1,at=x,value=0xA5").value, 0xa5);
  EXPECT_EQ(Spec("stuck-byte:step=1,at=x,value=7").value, 7);
  for (FaultKind k : {FaultKind::kBitflip, FaultKind::kMultibit, FaultKind::kStuckByte, FaultKind::kRandom,
                      FaultKind::kNan, FaultKind::kInf}) {
    EXPECT_TRUE(CorruptsTensor(k)) << FaultKindName(k);
    EXPECT_EQ(Spec(std::string(FaultKindName(k)) + ":step=1,at=x").kind, k);
  }
  for (FaultKind k : {FaultKind::kRace, FaultKind::kSharedRng, FaultKind::kReduceOrder, FaultKind::kSkipRestore}) {
    EXPECT_FALSE(CorruptsTensor(k)) << FaultKindName(k);
  }
}

TEST(TensorFaults, TensorFaultAtFindsAnyKindAtItsStepAndRank) {
  const std::vector<FaultSpec> faults = {Spec("race:step=2,at=x"), Spec("nan:step=2,rank=1,at=x"),
                                         Spec("random:step=3,at=x")};
  EXPECT_EQ(TensorFaultAt(faults, 2, 1), &faults[1]);
  EXPECT_EQ(TensorFaultAt(faults, 2, 0), nullptr);
  EXPECT_EQ(TensorFaultAt(faults, 3, 0), &faults[2]);
}

// The data-parallel faults' sums (model/fault_reducers.h) over 2 in-process
// ranks of 3 examples each, 8 values an example.
struct FaultReducerRun {
  static constexpr int kRanks = 2, kPerRank = 3;
  static constexpr size_t kValues = 8;
  // example e's value k; in [2, 6): small integers, whose sum is exact in any
  // order; elsewhere values whose sum depends on the order.
  static float Value(size_t e, size_t k) {
    if (k >= 2 && k < 6) return static_cast<float>(e * 10 + k);
    return std::ldexp(1.0f + 0.001f * static_cast<float>(e), static_cast<int>((e * 7 + k) % 40) - 20);
  }
  // Runs `fn(comm, shard)` on every rank; the shards hold the examples'
  // values and are checked unchanged afterwards.
  template <typename Fn>
  void Run(Fn fn) {
    InProcessGroup group(kRanks);
    std::vector<std::thread> threads;
    for (int r = 0; r < kRanks; ++r) {
      threads.emplace_back([&, r] {
        std::vector<std::vector<float>> buffers(kPerRank, std::vector<float>(kValues));
        std::vector<float*> shard;
        for (int i = 0; i < kPerRank; ++i) {
          for (size_t k = 0; k < kValues; ++k) buffers[i][k] = Value(r * kPerRank + i, k);
          shard.push_back(buffers[i].data());
        }
        fn(*group.ranks[static_cast<size_t>(r)], std::span<float* const>(shard));
        for (int i = 0; i < kPerRank; ++i) {
          for (size_t k = 0; k < kValues; ++k) {
            const float v = Value(r * kPerRank + i, k);
            EXPECT_EQ(std::memcmp(&buffers[i][k], &v, sizeof v), 0) << "the fault's sum wrote its input";
          }
        }
      });
    }
    for (auto& t : threads) t.join();
  }
};

TEST(FaultReducers, ReduceOrderSumsEveryExampleInExampleOrderOnEveryRank) {
  constexpr uint64_t kBatch = FaultReducerRun::kRanks * FaultReducerRun::kPerRank;
  std::vector<float> want(FaultReducerRun::kValues);
  for (size_t k = 0; k < want.size(); ++k) {
    want[k] = FaultReducerRun::Value(0, k);
    for (uint64_t e = 1; e < kBatch; ++e) want[k] += FaultReducerRun::Value(e, k);
  }
  FaultReducerRun().Run([&](Communicator& comm, std::span<float* const> shard) {
    std::vector<float> out(FaultReducerRun::kValues, std::nanf(""));
    ASSERT_TRUE(ReduceInExampleOrder(comm, shard, out.size(), kBatch, out.data()).ok());
    EXPECT_EQ(std::memcmp(out.data(), want.data(), want.size() * sizeof(float)), 0) << "rank " << comm.rank();
  });
}

// The race sums the examples' own values (whatever its order, the integers
// add up exactly), and every rank gets rank 0's sum.
TEST(FaultReducers, ARaceSumsTheExamplesOwnValuesAndEveryRankGetsRankZerosSum) {
  constexpr uint64_t kBatch = FaultReducerRun::kRanks * FaultReducerRun::kPerRank;
  std::vector<std::vector<float>> sums(FaultReducerRun::kRanks);
  FaultReducerRun().Run([&](Communicator& comm, std::span<float* const> shard) {
    ASSERT_TRUE(RacyReduceRange(comm, shard, 2, 4, kBatch, 3, &sums[static_cast<size_t>(comm.rank())]).ok());
  });
  for (size_t k = 2; k < 6; ++k) {
    float exact = 0.0f;
    for (uint64_t e = 0; e < kBatch; ++e) exact += FaultReducerRun::Value(e, k);
    for (const std::vector<float>& sum : sums) {
      ASSERT_EQ(sum.size(), 4u);
      EXPECT_EQ(sum[k - 2], exact) << "value " << k;
    }
  }
}

}  // namespace
}  // namespace dgrr::model
