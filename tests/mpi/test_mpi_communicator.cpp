// MpiCommunicator's contract beyond the collectives' arithmetic, on 3 ranks (an odd size):
// split ordering and opting out, argument errors that name the collective, the group and
// the numbers, in-place and 16-bit data movement, p2p size mismatches found on receipt,
// the Work lifecycle, and teardown with work still queued.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>

#include "exec/mpi/group_communicators.hpp"
#include "exec/mpi/mpi_runtime.hpp"
#include "exec/mpi/mpi_types.hpp"
#include "schedules/layout.hpp"
#include "tests/mpi/mpi_test_support.hpp"

namespace tandem {
namespace {

using testing::filled;
using ::testing::HasSubstr;
using testing::holds;
using testing::host_tensor;

// The world ranks of `comm`'s members, in communicator rank order.
std::vector<std::int64_t> members(MpiCommunicator& comm) {
  testing::NullStream stream;
  Tensor mine = filled(1, DType::int64, [](auto) { return testing::world().rank(); });
  Tensor all = host_tensor(comm.size(), DType::int64);
  comm.all_gather(stream, mine, all)->wait();
  std::vector<std::int64_t> ranks;
  for (std::int64_t i = 0; i < all.numel(); ++i) ranks.push_back(testing::get(all, i));
  return ranks;
}

// The message of the std::invalid_argument that `f` throws; empty when it throws none.
template <typename F>
std::string invalid_argument_of(F f) {
  try {
    f();
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return {};
}

class Communicator3 : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_EQ(world_.size(), 3) << "run this program on 3 ranks"; }
  MpiCommunicator& world_ = testing::world();
  testing::NullStream stream_;
};

TEST_F(Communicator3, SplitOrdersByKey) {
  auto reversed = world_.split_mpi(0, -world_.rank(), "reversed");
  ASSERT_NE(reversed, nullptr);
  EXPECT_EQ(reversed->name(), "reversed");
  EXPECT_EQ(reversed->rank(), 2 - world_.rank());
  EXPECT_EQ(members(*reversed), (std::vector<std::int64_t>{2, 1, 0}));

  // Colors by parity: {0, 2} and {1}; equal keys keep the parent's order.
  auto parity = world_.split_mpi(world_.rank() % 2, 0, "parity");
  ASSERT_NE(parity, nullptr);
  const auto expected =
      world_.rank() % 2 == 0 ? std::vector<std::int64_t>{0, 2} : std::vector<std::int64_t>{1};
  EXPECT_EQ(members(*parity), expected);
}

TEST_F(Communicator3, NegativeColorJoinsNothing) {
  auto some = world_.split(world_.rank() == 1 ? -1 : 7, world_.rank(), "some");
  EXPECT_EQ(some == nullptr, world_.rank() == 1);
  if (some) {
    EXPECT_EQ(some->size(), 2);
  }
}

TEST_F(Communicator3, SizeMismatchesNameCollectiveGroupAndNumbers) {
  Tensor four = host_tensor(4, DType::fp32), six = host_tensor(6, DType::fp32);
  EXPECT_EQ(invalid_argument_of([&] { world_.all_gather(stream_, four, six); }),
            "all_gather on group world (size 3): output holds 6 elements, expected size × "
            "input = 3 × 4 = 12");
  EXPECT_EQ(invalid_argument_of([&] { world_.reduce_scatter(stream_, six, four, ReduceOp::sum); }),
            "reduce_scatter on group world (size 3): input holds 6 elements, expected size × "
            "output = 3 × 4 = 12");
  EXPECT_THAT(invalid_argument_of([&] { world_.all_to_all(stream_, four, four); }),
              HasSubstr("all_to_all on group world (size 3): input holds 4 elements and output 4"));
  EXPECT_THAT(invalid_argument_of([&] { world_.broadcast(stream_, four, 3); }),
              HasSubstr("broadcast on group world (size 3): root 3 is outside"));
  const P2POp bad_peer{P2POp::Kind::send, four, 5};
  EXPECT_THAT(invalid_argument_of([&] {
                world_.batch_p2p(stream_, {&bad_peer, 1});
              }),
              HasSubstr("batch_p2p on group world (size 3): op 0 (send) names peer 5"));
}

TEST_F(Communicator3, DtypeErrorsAreClear) {
  Tensor f = host_tensor(4, DType::fp32), i = host_tensor(12, DType::int32);
  EXPECT_THAT(invalid_argument_of([&] { world_.all_gather(stream_, f, i); }),
              HasSubstr("input is fp32 but output is int32"));
  Tensor bf16 = host_tensor(4, DType::bf16);
  EXPECT_THAT(invalid_argument_of([&] { world_.all_reduce(stream_, bf16, ReduceOp::sum); }),
              HasSubstr("all_reduce on group world (size 3): cannot reduce bf16"));
  Tensor phantom{Shape{4}, DType::fp32, nullptr, 0};
  EXPECT_THAT(invalid_argument_of([&] { world_.all_reduce(stream_, phantom, ReduceOp::sum); }),
              HasSubstr("has no storage"));
  Tensor whole = host_tensor(12, DType::fp32);
  Tensor first_block = whole.view(Shape{4}, 0);
  EXPECT_THAT(invalid_argument_of(
                  [&] { world_.reduce_scatter(stream_, whole, first_block, ReduceOp::sum); }),
              HasSubstr("input and output share memory"));
}

// 16-bit floats need no arithmetic to move: all-gather and broadcast carry their bits.
TEST_F(Communicator3, SixteenBitFloatsMoveBitForBit) {
  Tensor mine = host_tensor(2, DType::fp16), all = host_tensor(6, DType::fp16);
  auto* bits = static_cast<std::uint16_t*>(mine.storage->data());
  bits[0] = static_cast<std::uint16_t>(0x3c00 + world_.rank());  // 1.0 + rank ulps
  bits[1] = static_cast<std::uint16_t>(0x8000 | world_.rank());
  world_.all_gather(stream_, mine, all)->wait();
  const auto* got = static_cast<const std::uint16_t*>(all.storage->data());
  for (int r = 0; r < 3; ++r) {
    EXPECT_EQ(got[2 * r], 0x3c00 + r);
    EXPECT_EQ(got[2 * r + 1], 0x8000 | r);
  }
}

// The distributed optimizer's parameter gather: each rank's shard already sits in its block.
TEST_F(Communicator3, AllGatherInPlace) {
  const int r = world_.rank();
  Tensor full = filled(15, DType::int32, [&](std::int64_t k) { return k / 5 == r ? k : -1; });
  Tensor shard = full.view(Shape{5}, 5 * r);
  world_.all_gather(stream_, shard, full)->wait();
  EXPECT_TRUE(holds(full, [](std::int64_t k) { return k; }));
}

TEST_F(Communicator3, ShortReceiveIsAnError) {
  const int r = world_.rank();
  if (r == 2) return;  // a p2p test between ranks 0 and 1
  Tensor buffer = host_tensor(r == 0 ? 4 : 8, DType::fp32);
  const P2POp op{r == 0 ? P2POp::Kind::send : P2POp::Kind::recv, buffer, 1 - r};
  auto work = world_.batch_p2p(stream_, {&op, 1});
  if (r == 0) {
    EXPECT_NO_THROW(work->wait());
  } else {
    try {
      work->wait();
      ADD_FAILURE() << "a receive of 4 elements into 8 did not throw";
    } catch (const std::invalid_argument& e) {
      EXPECT_THAT(e.what(), HasSubstr("batch_p2p on group world (size 3): op 0 received 4 "
                                      "elements from peer 0, its tensor holds 8"));
    }
  }
}

// test() is false while the peer has not sent — rank 1 sends only after a barrier that
// rank 0 enters after testing — and true after wait(); timings are ordered.
TEST_F(Communicator3, WorkLifecycle) {
  auto pair = world_.split_mpi(world_.rank() < 2 ? 0 : -1, 0, "pair");
  Tensor buffer = filled(3, DType::int64, [&](std::int64_t i) { return world_.rank() * 10 + i; });
  std::unique_ptr<Work> work;
  if (world_.rank() == 0) {
    const P2POp recv{P2POp::Kind::recv, buffer, 1};
    work = pair->batch_p2p(stream_, {&recv, 1});
    EXPECT_FALSE(work->test());
  }
  world_.barrier();
  if (world_.rank() == 1) {
    const P2POp send{P2POp::Kind::send, buffer, 0};
    pair->batch_p2p(stream_, {&send, 1})->wait();
  }
  if (world_.rank() == 0) {
    work->wait();
    EXPECT_TRUE(work->test());
    EXPECT_TRUE(holds(buffer, [](std::int64_t i) { return 10 + i; }));
    const WorkTiming t = *dynamic_cast<MpiWork&>(*work).timing();
    EXPECT_LE(t.issued, t.started);
    EXPECT_LE(t.started, t.finished);
    EXPECT_EQ(dynamic_cast<MpiWork&>(*work).label(), "batch_p2p pair");
  }
}

// Work dropped unwaited still runs: destroying the communicator drains its queue.
TEST_F(Communicator3, TeardownDrainsIssuedWork) {
  Tensor buffer = filled(5, DType::int32, [&](auto) { return world_.rank() + 1; });
  {
    auto comm = world_.split_mpi(0, world_.rank(), "drained");
    for (int k = 0; k < 3; ++k) comm->all_reduce(stream_, buffer, ReduceOp::sum);
  }
  EXPECT_TRUE(holds(buffer, [](std::int64_t) { return 6 * 3 * 3; }));
}

TEST_F(Communicator3, OneRuntimePerProcess) {
  int argc = 0;
  char** argv = nullptr;
  EXPECT_THROW(MpiRuntime(argc, argv), std::logic_error);
}

TEST_F(Communicator3, GroupCommunicatorsNeedTheLayoutWorld) {
  const Layout layout = make_layout({.world_size = 4, .tp = 2});
  EXPECT_EQ(invalid_argument_of([&] { make_group_communicators(world_, layout); }),
            "make_group_communicators: the world communicator has 3 ranks but the layout needs "
            "tp × pp × dp × cp = 2 × 1 × 2 × 1 = 4");
}

}  // namespace
}  // namespace tandem
