// The in-process communicator: every collective moves exactly the bytes it
// should for 1 to 5 ranks; a rank that calls another collective, passes
// inconsistent sizes or aborts makes every rank fail instead of hang.
#include "runtime/inprocess_communicator.h"

#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <vector>

#include "tests/runtime/collective_checks.h"

namespace dgrr {
namespace {

using testing_collectives::OnEveryRank;

// The checks are shared with the MPI test program (tests/runtime/mpi/), so the
// in-process and MPI backends are held to the same bytes.
class CommunicatorTest : public ::testing::TestWithParam<int> {
 protected:
  static void ExpectOkOnEveryRank(const std::function<Status(Communicator&)>& check) {
    for (const Status& s : OnEveryRank(GetParam(), check)) EXPECT_TRUE(s.ok()) << s.ToString();
  }
};

TEST_P(CommunicatorTest, BroadcastCopiesTheRootsBytes) {
  ExpectOkOnEveryRank(testing_collectives::CheckBroadcast);
}

TEST_P(CommunicatorTest, AllGatherAndAllGatherVConcatenateInRankOrder) {
  ExpectOkOnEveryRank(testing_collectives::CheckAllGathers);
}

TEST_P(CommunicatorTest, AllToAllVDeliversEachPairsBytesAtTheirOffsets) {
  ExpectOkOnEveryRank(testing_collectives::CheckAllToAllV);
}

TEST_P(CommunicatorTest, RepeatedCollectivesDoNotOverlapRounds) {
  ExpectOkOnEveryRank(testing_collectives::CheckRepeatedRounds);
}

INSTANTIATE_TEST_SUITE_P(Sizes, CommunicatorTest, ::testing::Values(1, 2, 3, 5));

TEST(CommunicatorFailures, DifferentCollectivesFailEveryRank) {
  auto results = OnEveryRank(2, [](Communicator& c) {
    if (c.rank() == 0) return c.Barrier();
    uint8_t b = 0, all[2];
    return c.AllGather(&b, 1, all);
  });
  for (const Status& s : results) {
    ASSERT_FALSE(s.ok());
    EXPECT_NE(s.message().find("collective mismatch"), std::string::npos) << s.ToString();
  }
}

TEST(CommunicatorFailures, InconsistentSizesFailEveryRank) {
  auto results = OnEveryRank(3, [](Communicator& c) {
    std::vector<size_t> send_counts(3, 4), offsets{0, 4, 8}, recv_counts(3, 4);
    if (c.rank() == 2) send_counts[1] = 3;  // rank 1 expects 4 from rank 2
    std::vector<uint8_t> send(12), recv(12);
    return c.AllToAllV(send.data(), send_counts, offsets, recv.data(), recv_counts, offsets);
  });
  for (const Status& s : results) {
    ASSERT_FALSE(s.ok());
    EXPECT_NE(s.message().find("rank 2 sends 3 bytes to rank 1"), std::string::npos) << s.ToString();
  }
}

TEST(CommunicatorFailures, AnAbortedRankReleasesItsPeers) {
  auto results = OnEveryRank(3, [](Communicator& c) {
    if (c.rank() == 1) {
      c.Abort(Status::IOError("rank 1 lost its disk"));
      return Status::OK();
    }
    DGRR_RETURN_IF_ERROR(c.Barrier());  // would wait for rank 1 forever
    return Status::Internal("the barrier passed without rank 1");
  });
  EXPECT_EQ(results[0].message(), "rank 1 lost its disk");
  EXPECT_EQ(results[2].message(), "rank 1 lost its disk");
}

TEST(CommunicatorFailures, DeviceBuffersAreRefusedByTheHostBackend) {
  Placement device;
  device.kind = Placement::Kind::kCuda;
  device.device = 0;
  auto results = OnEveryRank(2, [&](Communicator& c) {
    uint8_t b = 0;
    return c.Broadcast(&b, 1, 0, c.rank() == 1 ? device : Placement::Host());
  });
  for (const Status& s : results) ASSERT_FALSE(s.ok());
  EXPECT_EQ(results[1].code(), StatusCode::kFailedPrecondition);
}

}  // namespace
}  // namespace dgrr
