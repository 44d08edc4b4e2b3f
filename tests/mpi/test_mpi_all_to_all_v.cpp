// MpiCommunicator::all_to_all_v on 4 ranks: a seeded, uneven split matrix (zero counts
// included, one rank sending nothing at all) on the world and on split sub-groups, every
// received element checked against the sender and position it must come from; and the
// argument checks, whose messages name the call, the group and the numbers. Also the host
// counts' all-gather of the mixture of experts.
#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "tests/mpi/mpi_test_support.hpp"

namespace tandem {
namespace {

using testing::filled;
using testing::holds;
using testing::host_tensor;

using Matrix = std::vector<std::vector<std::int64_t>>;  // [src][dst] element counts

// The same matrix on every rank (a fixed seed), counts in [0, 7], with zeros forced on
// the diagonal's neighbour and for every send of the last rank.
Matrix seeded_counts(int n, unsigned seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<std::int64_t> count(0, 7);
  Matrix m(static_cast<std::size_t>(n), std::vector<std::int64_t>(static_cast<std::size_t>(n)));
  for (int s = 0; s < n; ++s)
    for (int d = 0; d < n; ++d) m[s][d] = count(rng);
  for (int s = 0; s < n; ++s) m[s][(s + 1) % n] = 0;
  for (int d = 0; d < n; ++d) m[n - 1][d] = 0;
  return m;
}

// The k-th element src sends to dst: distinct for every (src, dst, k), exact in fp32.
std::int64_t value(int src, int dst, std::int64_t k) {
  return src * 10000 + dst * 100 + k;
}

std::int64_t sum(const std::vector<std::int64_t>& v) {
  std::int64_t s = 0;
  for (auto x : v) s += x;
  return s;
}

// Runs one all_to_all_v on `comm` with split matrix m and checks every received element.
void exchange_and_check(Communicator& comm, const Matrix& m, DType dtype) {
  const int n = comm.size(), me = comm.rank();
  std::vector<std::int64_t> send = m[static_cast<std::size_t>(me)], recv;
  for (int s = 0; s < n; ++s) recv.push_back(m[static_cast<std::size_t>(s)][me]);
  // Input: the segments for dst 0, 1, … in order.
  std::vector<std::int64_t> in_values;
  for (int d = 0; d < n; ++d)
    for (std::int64_t k = 0; k < send[static_cast<std::size_t>(d)]; ++k)
      in_values.push_back(value(me, d, k));
  Tensor input = filled(sum(send), dtype, [&](std::int64_t i) { return in_values[i]; });
  Tensor output = filled(sum(recv), dtype, [](std::int64_t) { return -1; });
  // Expected, built from the matrix alone: src 0's segment for me, then src 1's, …
  std::vector<std::int64_t> expected;
  for (int s = 0; s < n; ++s)
    for (std::int64_t k = 0; k < recv[static_cast<std::size_t>(s)]; ++k)
      expected.push_back(value(s, me, k));
  testing::NullStream stream;
  comm.all_to_all_v(stream, input, send, output, recv)->wait();
  ASSERT_EQ(output.numel(), static_cast<std::int64_t>(expected.size()));
  EXPECT_TRUE(holds(output, [&](std::int64_t i) { return expected[i]; }))
      << "rank " << me << " of " << comm.name();
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

class AllToAllV4 : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_EQ(world_.size(), 4) << "run this program on 4 ranks"; }
  MpiCommunicator& world_ = testing::world();
  testing::NullStream stream_;
};

TEST_F(AllToAllV4, SeededUnevenSplitsArriveInRankOrder) {
  for (unsigned seed : {1u, 2u, 3u}) {
    exchange_and_check(world_, seeded_counts(4, seed), DType::int64);
    exchange_and_check(world_, seeded_counts(4, seed + 100), DType::fp32);
  }
}

TEST_F(AllToAllV4, AllZeroSplitsAreANoOp) {
  exchange_and_check(world_, Matrix(4, std::vector<std::int64_t>(4, 0)), DType::int32);
}

TEST_F(AllToAllV4, UniformSplitsMatchAllToAll) {
  const std::int64_t block = 5;
  Tensor input = filled(4 * block, DType::int64, [&](std::int64_t i) {
    return value(world_.rank(), int(i / block), i % block);
  });
  Tensor by_v = host_tensor(4 * block, DType::int64), by_all = host_tensor(4 * block, DType::int64);
  const std::vector<std::int64_t> counts(4, block);
  world_.all_to_all_v(stream_, input, counts, by_v, counts)->wait();
  world_.all_to_all(stream_, input, by_all)->wait();
  EXPECT_TRUE(holds(by_v, [&](std::int64_t i) { return testing::get(by_all, i); }));
}

TEST_F(AllToAllV4, SubGroupsUseGroupRanks) {
  // {0, 2} and {1, 3}, the second in reverse order: group rank, not world rank, indexes.
  auto pair = world_.split_mpi(world_.rank() % 2,
                               world_.rank() % 2 == 0 ? world_.rank() : -world_.rank(), "ep");
  ASSERT_NE(pair, nullptr);
  ASSERT_EQ(pair->size(), 2);
  exchange_and_check(*pair, Matrix{{3, 0}, {2, 6}}, DType::int64);
  exchange_and_check(*pair, Matrix{{0, 4}, {1, 0}}, DType::fp32);
}

TEST_F(AllToAllV4, BadSplitsNameCallGroupAndNumbers) {
  Tensor six = host_tensor(6, DType::fp32), eight = host_tensor(8, DType::fp32);
  Tensor six_int = host_tensor(6, DType::int32);
  const std::vector<std::int64_t> good_send{1, 2, 3, 0}, good_recv{2, 2, 2, 2};
  const std::vector<std::int64_t> three{1, 2, 3}, negative{4, -1, 3, 0}, short_sum{1, 1, 1, 1};
  EXPECT_EQ(
      invalid_argument_of([&] { world_.all_to_all_v(stream_, six, three, eight, good_recv); }),
      "all_to_all_v on group world (size 4): send_counts holds 3 counts, expected one per "
      "rank = 4");
  EXPECT_EQ(
      invalid_argument_of([&] { world_.all_to_all_v(stream_, six, negative, eight, good_recv); }),
      "all_to_all_v on group world (size 4): send_counts[1] = -1 is negative");
  EXPECT_EQ(
      invalid_argument_of([&] { world_.all_to_all_v(stream_, six, good_send, eight, short_sum); }),
      "all_to_all_v on group world (size 4): recv_counts sum to 4 elements but output holds 8");
  EXPECT_EQ(invalid_argument_of(
                [&] { world_.all_to_all_v(stream_, six_int, good_send, eight, good_recv); }),
            "all_to_all_v on group world (size 4): input is int32 but output is fp32");
  EXPECT_EQ(
      invalid_argument_of([&] { world_.all_to_all_v(stream_, six, good_send, six, good_send); }),
      "all_to_all_v on group world (size 4): input and output share memory");
  // Nothing was issued by the refused calls: the group still works.
  exchange_and_check(world_, seeded_counts(4, 7), DType::int64);
}

// all_gather_counts, the MoE split sizes on the host: rank r's 3 counts (r, 10 r, 100 r)
// land at r · 3 on every rank, on the world and on a sub-group (group ranks); a result of
// the wrong length is refused naming the call, the group and the numbers.
TEST_F(AllToAllV4, HostCountsAreGatheredRankMajor) {
  const std::int64_t r = world_.rank();
  const std::vector<std::int64_t> mine{r, 10 * r, 100 * r};
  std::vector<std::int64_t> all(12, -1);
  world_.all_gather_counts(stream_, mine, all);
  for (std::int64_t q = 0; q < 4; ++q) {
    EXPECT_EQ(all[static_cast<std::size_t>(3 * q)], q);
    EXPECT_EQ(all[static_cast<std::size_t>(3 * q + 1)], 10 * q);
    EXPECT_EQ(all[static_cast<std::size_t>(3 * q + 2)], 100 * q);
  }
  auto pair = world_.split_mpi(world_.rank() % 2, world_.rank(), "pair");
  std::vector<std::int64_t> two(6, -1);
  pair->all_gather_counts(stream_, mine, two);
  EXPECT_EQ(two[0], world_.rank() % 2);      // group rank 0 is world rank 0 or 1
  EXPECT_EQ(two[3], world_.rank() % 2 + 2);  // group rank 1 is world rank 2 or 3
  std::vector<std::int64_t> short_result(11);
  EXPECT_EQ(invalid_argument_of([&] { world_.all_gather_counts(stream_, mine, short_result); }),
            "all_gather_counts on group world (size 4): 11 places for 4 members' 3 counts");
}

}  // namespace
}  // namespace tandem
