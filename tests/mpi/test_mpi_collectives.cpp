// Collectives checked analytically on every group kind of the TP=2, PP=2, DP=2 layout
// (run on 8 ranks). Rank r of an n-rank communicator contributes values f(r, i) whose
// sum, maximum and minimum over r are known in closed form; gathers and exchanges carry
// values that encode (source rank, destination rank, element), so a block landing in the
// wrong place names itself. Every check runs for fp32, int32 and int64.
#include <gtest/gtest.h>

#include <array>
#include <map>
#include <vector>

#include "exec/mpi/group_communicators.hpp"
#include "schedules/layout.hpp"
#include "tests/mpi/mpi_test_support.hpp"

namespace tandem {
namespace {

using testing::filled;
using testing::holds;
using testing::NullStream;

constexpr std::int64_t kElements = 37;  // odd, so no algorithm gets a power-of-two gift
constexpr std::array kDTypes = {DType::fp32, DType::int32, DType::int64};

class GroupCollectives : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    layout_ = new Layout(make_layout({.world_size = 8, .tp = 2, .pp = 2}));
    groups_ = new GroupCommunicators(make_group_communicators(testing::world(), *layout_));
  }
  static void TearDownTestSuite() {
    delete groups_;
    delete layout_;
  }

  // Runs `check` on each of this rank's communicators, for each dtype, tracing both.
  template <typename Check>
  void for_each_group(Check check) {
    for (auto& [kind, comm] : *groups_) {
      for (DType dtype : kDTypes) {
        SCOPED_TRACE(std::string(group_kind_name(kind)) + " " + std::string(dtype_name(dtype)));
        check(*comm, dtype);
      }
    }
  }

  static inline Layout* layout_ = nullptr;
  static inline GroupCommunicators* groups_ = nullptr;
  NullStream stream_;
};

TEST_F(GroupCollectives, EveryRankHasTheGroupsOfItsLayout) {
  const ParallelContext ctx = make_parallel_context(*layout_, testing::world().rank());
  for (GroupKind kind : kAllGroupKinds) {
    if (!layout_->groups.contains(kind)) continue;
    SCOPED_TRACE(std::string(group_kind_name(kind)));
    const auto it = groups_->find(kind);
    ASSERT_EQ(it != groups_->end(), ctx.in_group(kind));
    if (it == groups_->end()) continue;
    EXPECT_EQ(it->second->name(), group_kind_name(kind));
    EXPECT_EQ(it->second->size(), static_cast<int>(ctx.group(kind).size()));
  }
}

// Communicator rank order equals the group's order: gathering the global ranks gives the
// group exactly as the layout lists it (e.g. dp [5, 7] on rank 5 and on rank 7).
TEST_F(GroupCollectives, RankOrderIsTheGroupOrder) {
  const ParallelContext ctx = make_parallel_context(*layout_, testing::world().rank());
  for (auto& [kind, comm] : *groups_) {
    SCOPED_TRACE(std::string(group_kind_name(kind)));
    const auto& group = ctx.group(kind);
    Tensor mine = filled(1, DType::int32, [&](auto) { return testing::world().rank(); });
    Tensor all = testing::host_tensor(comm->size(), DType::int32);
    comm->all_gather(stream_, mine, all)->wait();
    EXPECT_TRUE(holds(all, [&](std::int64_t i) { return group[static_cast<std::size_t>(i)]; }));
    EXPECT_EQ(group[static_cast<std::size_t>(comm->rank())], testing::world().rank());
  }
}

TEST_F(GroupCollectives, AllReduceSumMaxMin) {
  for_each_group([&](MpiCommunicator& comm, DType dtype) {
    const std::int64_t n = comm.size(), r = comm.rank();
    // int64 carries a term beyond 32 bits, so a 32-bit reduction of it would show.
    const std::int64_t big = dtype == DType::int64 ? std::int64_t{1} << 36 : 0;
    Tensor sum = filled(kElements, dtype, [&](std::int64_t i) {
      return (r + 1) * (i % 13 + 1) - i % 5 + big * (r + 1);
    });
    comm.all_reduce(stream_, sum, ReduceOp::sum)->wait();
    EXPECT_TRUE(holds(sum, [&](std::int64_t i) {
      return (i % 13 + 1) * n * (n + 1) / 2 - n * (i % 5) + big * n * (n + 1) / 2;
    }));
    // Over r, 3·((r + i) mod n) − 2 takes each of its n values once: the maximum and the
    // minimum come from a different rank at each element.
    auto spread = [&](std::int64_t i) { return 3 * ((r + i) % n) - 2; };
    Tensor max = filled(kElements, dtype, spread), min = filled(kElements, dtype, spread);
    comm.all_reduce(stream_, max, ReduceOp::max)->wait();
    comm.all_reduce(stream_, min, ReduceOp::min)->wait();
    EXPECT_TRUE(holds(max, [&](std::int64_t) { return 3 * (n - 1) - 2; }));
    EXPECT_TRUE(holds(min, [&](std::int64_t) { return -2; }));
  });
}

TEST_F(GroupCollectives, AllGatherIsRankMajor) {
  for_each_group([&](MpiCommunicator& comm, DType dtype) {
    const std::int64_t n = comm.size(), r = comm.rank();
    Tensor input = filled(kElements, dtype, [&](std::int64_t i) { return r * 1000 + i; });
    Tensor output = testing::host_tensor(n * kElements, dtype);
    comm.all_gather(stream_, input, output)->wait();
    EXPECT_TRUE(
        holds(output, [&](std::int64_t k) { return (k / kElements) * 1000 + k % kElements; }));
  });
}

TEST_F(GroupCollectives, ReduceScatterGivesEachRankItsBlock) {
  for_each_group([&](MpiCommunicator& comm, DType dtype) {
    const std::int64_t n = comm.size(), r = comm.rank();
    Tensor input = filled(n * kElements, dtype, [&](std::int64_t k) { return (r + 1) * (k + 1); });
    Tensor output = testing::host_tensor(kElements, dtype);
    comm.reduce_scatter(stream_, input, output, ReduceOp::sum)->wait();
    // Σ_s (s + 1)(k + 1) = n(n + 1)/2 · (k + 1) with k = r·m + i.
    EXPECT_TRUE(
        holds(output, [&](std::int64_t i) { return n * (n + 1) / 2 * (r * kElements + i + 1); }));
    Tensor spread = filled(n * kElements, dtype, [&](std::int64_t k) { return (r + k) % n; });
    comm.reduce_scatter(stream_, spread, output, ReduceOp::max)->wait();
    EXPECT_TRUE(holds(output, [&](std::int64_t) { return n - 1; }));
  });
}

TEST_F(GroupCollectives, BroadcastFromEveryRoot) {
  for_each_group([&](MpiCommunicator& comm, DType dtype) {
    for (int root = 0; root < comm.size(); ++root) {
      Tensor buffer = filled(kElements, dtype, [&](std::int64_t i) {
        return comm.rank() == root ? root * 100 + i : -1;
      });
      comm.broadcast(stream_, buffer, root)->wait();
      EXPECT_TRUE(holds(buffer, [&](std::int64_t i) { return root * 100 + i; })) << "root " << root;
    }
  });
}

TEST_F(GroupCollectives, AllToAllTransposesBlocks) {
  for_each_group([&](MpiCommunicator& comm, DType dtype) {
    const std::int64_t n = comm.size(), r = comm.rank();
    // Block j of rank r's input goes to rank j: value = source·10000 + destination·100 + i.
    Tensor input = filled(n * kElements, dtype, [&](std::int64_t k) {
      return r * 10000 + (k / kElements) * 100 + k % kElements;
    });
    Tensor output = testing::host_tensor(n * kElements, dtype);
    comm.all_to_all(stream_, input, output)->wait();
    EXPECT_TRUE(holds(
        output, [&](std::int64_t k) { return (k / kElements) * 10000 + r * 100 + k % kElements; }));
  });
}

// Megatron's send_forward_backward_recv_forward_backward on a ring: each rank sends an
// activation to the next rank and a gradient to the previous one, and receives both, in
// one batch, with Megatron's even/odd op order. With two ranks next and previous are the
// same peer, so the two messages each way match by their order in the batch.
TEST_F(GroupCollectives, BatchP2PBothDirections) {
  for_each_group([&](MpiCommunicator& comm, DType dtype) {
    const int n = comm.size(), r = comm.rank();
    const int next = (r + 1) % n, prev = (r + n - 1) % n;
    auto activation = [](std::int64_t from) {
      return [from](std::int64_t i) { return from * 100 + i + 1; };
    };
    auto gradient = [](std::int64_t from) {
      return [from](std::int64_t i) { return -(from * 100 + i + 1); };
    };
    Tensor send_fwd = filled(kElements, dtype, activation(r));
    Tensor send_bwd = filled(kElements, dtype, gradient(r));
    Tensor recv_fwd = filled(kElements, dtype, [](auto) { return 0; });
    Tensor recv_bwd = filled(kElements, dtype, [](auto) { return 0; });
    using K = P2POp::Kind;
    const std::vector<P2POp> ops = r % 2 == 0 ? std::vector<P2POp>{{K::send, send_fwd, next},
                                                                   {K::recv, recv_fwd, prev},
                                                                   {K::send, send_bwd, prev},
                                                                   {K::recv, recv_bwd, next}}
                                              : std::vector<P2POp>{{K::recv, recv_fwd, prev},
                                                                   {K::send, send_fwd, next},
                                                                   {K::recv, recv_bwd, next},
                                                                   {K::send, send_bwd, prev}};
    comm.batch_p2p(stream_, ops)->wait();
    EXPECT_TRUE(holds(recv_fwd, activation(prev))) << "activation from " << prev;
    EXPECT_TRUE(holds(recv_bwd, gradient(next))) << "gradient from " << next;
  });
}

// All groups at once: one all-reduce issued on every communicator before any is waited
// on, so the communication threads of tp, pp, dp, … run MPI concurrently.
TEST_F(GroupCollectives, ConcurrentCollectivesOnEveryGroup) {
  std::vector<Tensor> buffers;
  std::vector<std::unique_ptr<Work>> works;
  for (auto& [kind, comm] : *groups_) {
    const std::int64_t r = comm->rank();
    buffers.push_back(filled(kElements, DType::int64, [&](std::int64_t i) { return r + i; }));
    works.push_back(comm->all_reduce(stream_, buffers.back(), ReduceOp::sum));
  }
  for (auto it = works.rbegin(); it != works.rend(); ++it) (*it)->wait();
  std::size_t g = 0;
  for (auto& [kind, comm] : *groups_) {
    SCOPED_TRACE(std::string(group_kind_name(kind)));
    const std::int64_t n = comm->size();
    EXPECT_TRUE(holds(buffers[g++], [&](std::int64_t i) { return n * (n - 1) / 2 + n * i; }));
  }
}

}  // namespace
}  // namespace tandem
