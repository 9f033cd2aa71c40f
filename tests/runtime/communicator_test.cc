// The in-process communicator: every collective moves exactly the bytes it
// should for 1 to 5 ranks; a rank that calls another collective, passes
// inconsistent sizes or aborts makes every rank fail instead of hang.
#include <gtest/gtest.h>

#include <functional>
#include <numeric>
#include <thread>
#include <vector>

#include "runtime/inprocess_communicator.h"

namespace dgrr {
namespace {

// Runs body(comm) on one thread per rank and returns each rank's status.
std::vector<Status> OnEveryRank(int size, const std::function<Status(Communicator&)>& body) {
  InProcessGroup group(size);
  std::vector<Status> results(static_cast<size_t>(size));
  std::vector<std::thread> threads;
  for (int r = 0; r < size; ++r) {
    threads.emplace_back(
        [&, r] { results[static_cast<size_t>(r)] = body(*group.ranks[static_cast<size_t>(r)]); });
  }
  for (auto& t : threads) t.join();
  return results;
}

// A byte that names (sender, receiver, position).
uint8_t Byte(int from, int to, size_t i) { return static_cast<uint8_t>(from * 31 + to * 7 + i * 3 + 1); }

class CommunicatorTest : public ::testing::TestWithParam<int> {};

TEST_P(CommunicatorTest, BroadcastCopiesTheRootsBytes) {
  const int size = GetParam();
  for (int root = 0; root < size; ++root) {
    auto results = OnEveryRank(size, [&](Communicator& c) {
      std::vector<uint8_t> data(37);
      for (size_t i = 0; i < data.size(); ++i) data[i] = Byte(c.rank(), 0, i);
      DGRR_RETURN_IF_ERROR(c.Broadcast(data.data(), data.size(), root));
      for (size_t i = 0; i < data.size(); ++i) {
        if (data[i] != Byte(root, 0, i)) return Status::Internal("byte " + std::to_string(i));
      }
      return Status::OK();
    });
    for (const Status& s : results) EXPECT_TRUE(s.ok()) << s.ToString();
  }
}

TEST_P(CommunicatorTest, AllGatherAndAllGatherVConcatenateInRankOrder) {
  const int size = GetParam();
  auto results = OnEveryRank(size, [&](Communicator& c) {
    std::vector<uint8_t> mine(16);
    for (size_t i = 0; i < mine.size(); ++i) mine[i] = Byte(c.rank(), 0, i);
    std::vector<uint8_t> all(16 * static_cast<size_t>(size));
    DGRR_RETURN_IF_ERROR(c.AllGather(mine.data(), mine.size(), all.data()));
    for (int r = 0; r < size; ++r) {
      for (size_t i = 0; i < 16; ++i) {
        if (all[static_cast<size_t>(r) * 16 + i] != Byte(r, 0, i)) return Status::Internal("AllGather");
      }
    }
    // Rank r contributes 3r bytes (rank 0 none).
    std::vector<size_t> counts(static_cast<size_t>(size));
    for (int r = 0; r < size; ++r) counts[static_cast<size_t>(r)] = 3 * static_cast<size_t>(r);
    std::vector<uint8_t> v(counts[static_cast<size_t>(c.rank())]);
    for (size_t i = 0; i < v.size(); ++i) v[i] = Byte(c.rank(), 1, i);
    std::vector<uint8_t> gathered(std::accumulate(counts.begin(), counts.end(), size_t{0}));
    DGRR_RETURN_IF_ERROR(c.AllGatherV(v.data(), counts, gathered.data()));
    size_t at = 0;
    for (int r = 0; r < size; ++r) {
      for (size_t i = 0; i < counts[static_cast<size_t>(r)]; ++i) {
        if (gathered[at++] != Byte(r, 1, i)) return Status::Internal("AllGatherV");
      }
    }
    return Status::OK();
  });
  for (const Status& s : results) EXPECT_TRUE(s.ok()) << s.ToString();
}

TEST_P(CommunicatorTest, AllToAllVDeliversEachPairsBytesAtTheirOffsets) {
  const int size = GetParam();
  // Rank s sends (s + d) % 3 + 1 bytes to rank d; layouts in reverse rank
  // order with gaps, so offsets matter.
  auto count = [](int s, int d) { return static_cast<size_t>((s + d) % 3 + 1); };
  auto results = OnEveryRank(size, [&](Communicator& c) {
    const int me = c.rank();
    const size_t n = static_cast<size_t>(size);
    std::vector<size_t> send_counts(n), send_offsets(n), recv_counts(n), recv_offsets(n);
    size_t send_bytes = 0, recv_bytes = 0;
    for (int d = size - 1; d >= 0; --d) {
      send_counts[static_cast<size_t>(d)] = count(me, d);
      send_offsets[static_cast<size_t>(d)] = send_bytes + 1;
      send_bytes += count(me, d) + 1;
      recv_counts[static_cast<size_t>(d)] = count(d, me);
      recv_offsets[static_cast<size_t>(d)] = recv_bytes + 2;
      recv_bytes += count(d, me) + 2;
    }
    std::vector<uint8_t> send(send_bytes, 0), recv(recv_bytes, 0xEE);
    for (int d = 0; d < size; ++d) {
      for (size_t i = 0; i < count(me, d); ++i)
        send[send_offsets[static_cast<size_t>(d)] + i] = Byte(me, d, i);
    }
    DGRR_RETURN_IF_ERROR(
        c.AllToAllV(send.data(), send_counts, send_offsets, recv.data(), recv_counts, recv_offsets));
    for (int s = 0; s < size; ++s) {
      const size_t at = recv_offsets[static_cast<size_t>(s)];
      for (size_t i = 0; i < count(s, me); ++i) {
        if (recv[at + i] != Byte(s, me, i)) return Status::Internal("from rank " + std::to_string(s));
      }
      if (recv[at - 1] != 0xEE) return Status::Internal("wrote outside the receive span");
    }
    return Status::OK();
  });
  for (const Status& s : results) EXPECT_TRUE(s.ok()) << s.ToString();
}

TEST_P(CommunicatorTest, RepeatedCollectivesDoNotOverlapRounds) {
  const int size = GetParam();
  auto results = OnEveryRank(size, [&](Communicator& c) {
    for (uint32_t round = 0; round < 200; ++round) {
      const uint32_t mine = round * 100 + static_cast<uint32_t>(c.rank());
      std::vector<uint32_t> all(static_cast<size_t>(size));
      DGRR_RETURN_IF_ERROR(c.AllGather(&mine, sizeof mine, all.data()));
      for (int r = 0; r < size; ++r) {
        if (all[static_cast<size_t>(r)] != round * 100 + static_cast<uint32_t>(r)) {
          return Status::Internal("round " + std::to_string(round));
        }
      }
    }
    return c.Barrier();
  });
  for (const Status& s : results) EXPECT_TRUE(s.ok()) << s.ToString();
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
