// The NCCL communicator over every visible GPU, one MPI rank per GPU (run.sh launches
// `mpirun -np <GPUs> test_nccl`): each collective and p2p pattern on seeded data whose
// result is known in closed form, in fp32, bf16 and int32; split and the layout's group
// communicators; argument errors. Every rank skips, with the reason, when no GPU is
// visible or there are more ranks than GPUs (NCCL refuses two ranks on one GPU).
#include <gtest/gtest.h>

#include <memory>
#include <vector>

#include "exec/cuda/cuda_device.hpp"
#include "exec/cuda/cuda_info.hpp"
#include "exec/cuda/nccl_groups.hpp"
#include "kernels/cuda/check.hpp"
#include "kernels/math/bf16.hpp"
#include "tests/mpi/mpi_test_support.hpp"

namespace tandem::testing {
namespace {

class Nccl : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    const auto a = cuda_availability();
    if (a.devices == 0) {
      skip_reason() = "needs a CUDA GPU: " + a.reason;
      return;
    }
    if (world().size() > a.devices) {
      skip_reason() = "needs a CUDA GPU per rank: " + std::to_string(world().size()) + " ranks, " +
                      std::to_string(a.devices) + " GPUs";
      return;
    }
    device() = std::make_unique<CudaDevice>(world().rank() % a.devices);
    nccl() = NcclCommunicator::create(world(), *device(), "world");
  }
  static void TearDownTestSuite() {
    nccl().reset();
    device().reset();
  }
  void SetUp() override {
    if (!skip_reason().empty()) GTEST_SKIP() << skip_reason();
  }

  static std::string& skip_reason() {
    static std::string reason;
    return reason;
  }
  static std::unique_ptr<CudaDevice>& device() {
    static std::unique_ptr<CudaDevice> d;
    return d;
  }
  static std::unique_ptr<NcclCommunicator>& nccl() {
    static std::unique_ptr<NcclCommunicator> c;
    return c;
  }

  CudaDevice& gpu() { return *device(); }
  NcclCommunicator& comm() { return *nccl(); }
  Stream& stream() { return gpu().default_stream(); }
  int rank() { return comm().rank(); }
  int size() { return comm().size(); }

  // A device tensor holding f(i) (rounded to bf16 when dtype is bf16).
  Tensor make(std::int64_t n, DType dtype, const std::function<double(int)>& f) {
    Tensor t = gpu().allocate({n}, dtype == DType::int32 ? DType::int32 : dtype);
    if (dtype == DType::int32) {
      gpu().upload(stream(), t, Device::ProduceInts([&](std::span<std::int32_t> out) {
                     for (std::size_t i = 0; i < out.size(); ++i)
                       out[i] = static_cast<std::int32_t>(f(static_cast<int>(i)));
                   }));
    } else {
      gpu().upload(stream(), t, Device::ProduceFloats([&](std::span<float> out) {
                     for (std::size_t i = 0; i < out.size(); ++i)
                       out[i] = static_cast<float>(f(static_cast<int>(i)));
                   }));
    }
    return t;
  }
  // The elements as doubles (int32 through a converting copy into fp32).
  std::vector<double> read(const Tensor& t) {
    if (t.dtype == DType::int32) {
      std::vector<std::int32_t> host(static_cast<std::size_t>(t.numel()));
      TANDEM_CUDA_CHECK(
          cudaMemcpy(host.data(), t.storage->data(), host.size() * 4, cudaMemcpyDeviceToHost));
      return {host.begin(), host.end()};
    }
    std::vector<float> host(static_cast<std::size_t>(t.numel()));
    gpu().download(stream(), t, host);
    return {host.begin(), host.end()};
  }
  void expect_values(const Tensor& t, const std::function<double(int)>& want,
                     const std::string& what) {
    const auto got = read(t);
    for (std::size_t i = 0; i < got.size(); ++i) {
      double w = want(static_cast<int>(i));
      if (t.dtype == DType::bf16) w = kernels::math::round_to_bf16(static_cast<float>(w));
      if (got[i] != w) {
        ADD_FAILURE() << what << ": element " << i << " is " << got[i] << ", expected " << w;
        return;
      }
    }
  }
};

// Small integers: sums stay exact in bf16 (≤ 256) and fp32.
double seed_value(int rank, int i) {
  return static_cast<double>((rank + 1) * ((i % 7) + 1));
}

TEST_F(Nccl, AllReduceSumMaxMinInEveryDtype) {
  const int n = size();
  const int count = 1000;
  for (DType dtype : {DType::fp32, DType::bf16, DType::int32}) {
    const std::string what(dtype_name(dtype));
    Tensor s = make(count, dtype, [&](int i) { return seed_value(rank(), i); });
    comm().all_reduce(stream(), s, ReduceOp::sum)->wait();
    expect_values(
        s, [&](int i) { return (i % 7 + 1) * n * (n + 1) / 2.0; }, "sum " + what);
    Tensor mx = make(count, dtype, [&](int i) { return seed_value(rank(), i); });
    comm().all_reduce(stream(), mx, ReduceOp::max)->wait();
    expect_values(
        mx, [&](int i) { return seed_value(n - 1, i); }, "max " + what);
    Tensor mn = make(count, dtype, [&](int i) { return seed_value(rank(), i); });
    comm().all_reduce(stream(), mn, ReduceOp::min)->wait();
    expect_values(
        mn, [&](int i) { return seed_value(0, i); }, "min " + what);
  }
}

TEST_F(Nccl, AllGatherAndReduceScatterAreConjugates) {
  const int block = 513;
  Tensor in = make(block, DType::fp32, [&](int i) { return rank() * 1000.0 + i; });
  Tensor out = gpu().allocate({size() * block}, DType::fp32);
  comm().all_gather(stream(), in, out)->wait();
  expect_values(
      out, [&](int i) { return (i / block) * 1000.0 + i % block; }, "all_gather");
  // In place: this rank's block of the output is the input.
  Tensor whole = make(size() * block, DType::fp32,
                      [&](int i) { return i / block == rank() ? 7.0 * rank() + 1 : -1.0; });
  Tensor mine = whole.view({block}, rank() * block);
  comm().all_gather(stream(), mine, whole)->wait();
  expect_values(
      whole, [&](int i) { return 7.0 * static_cast<double>(i / block) + 1; },
      "in-place all_gather");
  Tensor rs_in = make(size() * block, DType::fp32, [&](int i) { return seed_value(rank(), i); });
  Tensor rs_out = gpu().allocate({block}, DType::fp32);
  comm().reduce_scatter(stream(), rs_in, rs_out, ReduceOp::sum)->wait();
  const int n = size();
  expect_values(
      rs_out, [&](int i) { return ((rank() * block + i) % 7 + 1) * n * (n + 1) / 2.0; },
      "reduce_scatter");
}

TEST_F(Nccl, BroadcastFromEveryRoot) {
  for (int root = 0; root < size(); ++root) {
    Tensor t = make(300, DType::bf16, [&](int i) { return rank() == root ? root + i % 5 : -3.0; });
    comm().broadcast(stream(), t, root)->wait();
    expect_values(
        t, [&](int i) { return root + i % 5; }, "broadcast from " + std::to_string(root));
  }
}

TEST_F(Nccl, AllToAllTransposesBlocks) {
  const int block = 100;
  Tensor in = make(size() * block, DType::int32, [&](int i) {
    return rank() * 100000 + (i / block) * 1000 + i % block;  // (from, to, offset)
  });
  Tensor out = gpu().allocate({size() * block}, DType::int32);
  comm().all_to_all(stream(), in, out)->wait();
  expect_values(
      out,
      [&](int i) {
        return (i / block) * 100000.0 + rank() * 1000.0 + static_cast<double>(i % block);
      },
      "all_to_all");
}

TEST_F(Nccl, AllToAllVMovesUnevenSplitsInRankOrder) {
  // counts(src, dst) = ((src + 2·dst + 1) mod 3) · 50: uneven, zeros from 2 ranks on.
  auto count = [](int src, int dst) {
    return static_cast<std::int64_t>((src + 2 * dst + 1) % 3 * 50);
  };
  std::vector<std::int64_t> send, recv;
  for (int p = 0; p < size(); ++p) {
    send.push_back(count(rank(), p));
    recv.push_back(count(p, rank()));
  }
  std::vector<double> in_values, want;  // (from, to, offset)
  for (int p = 0; p < size(); ++p)
    for (std::int64_t k = 0; k < send[static_cast<std::size_t>(p)]; ++k)
      in_values.push_back(rank() * 100000.0 + p * 1000.0 + static_cast<double>(k));
  for (int p = 0; p < size(); ++p)
    for (std::int64_t k = 0; k < recv[static_cast<std::size_t>(p)]; ++k)
      want.push_back(p * 100000.0 + rank() * 1000.0 + static_cast<double>(k));
  Tensor in = make(static_cast<std::int64_t>(in_values.size()), DType::int32,
                   [&](int i) { return in_values[static_cast<std::size_t>(i)]; });
  Tensor out = gpu().allocate({static_cast<std::int64_t>(want.size())}, DType::int32);
  comm().all_to_all_v(stream(), in, send, out, recv)->wait();
  expect_values(
      out, [&](int i) { return want[static_cast<std::size_t>(i)]; }, "all_to_all_v");
}

TEST_F(Nccl, AllGatherCountsIsRankMajorOnTheHost) {
  // counts(rank, j) = 1000·rank + j: distinct per member and position.
  const std::vector<std::int64_t> mine{1000 * rank() + 0, 1000 * rank() + 1, 1000 * rank() + 2};
  std::vector<std::int64_t> all(mine.size() * static_cast<std::size_t>(size()), -1);
  comm().all_gather_counts(stream(), mine, all);
  for (std::size_t i = 0; i < all.size(); ++i)
    EXPECT_EQ(all[i], static_cast<std::int64_t>(1000 * (i / 3) + i % 3)) << "element " << i;
  std::vector<std::int64_t> short_of_one(all.size() - 1);
  try {
    comm().all_gather_counts(stream(), mine, short_of_one);
    ADD_FAILURE() << "all_gather_counts accepted a wrong output size";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("all_gather_counts on group world"), std::string::npos)
        << e.what();
  }
}

TEST_F(Nccl, BatchP2PRingShiftsBothWays) {
  const int next = (rank() + 1) % size(), prev = (rank() + size() - 1) % size();
  Tensor to_next =
      make(777, DType::fp32, [&](int i) { return rank() + 0.5 * static_cast<double>(i); });
  Tensor to_prev = make(777, DType::fp32, [&](int i) { return -rank() - static_cast<double>(i); });
  Tensor from_prev = gpu().allocate({777}, DType::fp32),
         from_next = gpu().allocate({777}, DType::fp32);
  const std::vector<P2POp> ops{{P2POp::Kind::send, to_next, next},
                               {P2POp::Kind::recv, from_prev, prev},
                               {P2POp::Kind::send, to_prev, prev},
                               {P2POp::Kind::recv, from_next, next}};
  auto work = comm().batch_p2p(stream(), ops);
  work->wait();
  EXPECT_TRUE(work->test());
  ASSERT_TRUE(work->timing().has_value());
  EXPECT_LE(work->timing()->issued, work->timing()->finished);
  expect_values(
      from_prev, [&](int i) { return prev + 0.5 * static_cast<double>(i); }, "from prev");
  expect_values(
      from_next, [&](int i) { return -next - static_cast<double>(i); }, "from next");
}

TEST_F(Nccl, SplitAndLayoutGroups) {
  comm().barrier();
  auto parity = comm().split_nccl(rank() % 2, -rank(), "parity");  // reversed order
  ASSERT_NE(parity, nullptr);
  const int members = (size() - rank() % 2 + 1) / 2;
  EXPECT_EQ(parity->size(), members);
  Tensor r = make(1, DType::int32, [&](int) { return rank(); });
  parity->all_reduce(stream(), r, ReduceOp::max)->wait();
  EXPECT_EQ(parity->rank(), members - 1 - rank() / 2);
  int max_same_parity = 0;
  for (int q = 0; q < size(); ++q)
    if (q % 2 == rank() % 2) max_same_parity = q;
  expect_values(
      r, [&](int) { return max_same_parity; }, "max over the parity group");
  auto first = comm().split_nccl(rank() == 0 ? 0 : -1, 0, "first");  // others opt out
  EXPECT_EQ(first == nullptr, rank() != 0);
  const int tp = size() % 2 == 0 ? 2 : 1;
  const Layout layout = make_layout({size(), tp, 1, 1, 1, "tp-cp-ep-dp-pp"});
  auto groups = make_nccl_group_communicators(comm(), layout);
  ASSERT_TRUE(groups.count(GroupKind::tp));
  EXPECT_EQ(groups.at(GroupKind::tp)->size(), tp);
  EXPECT_EQ(groups.at(GroupKind::tp)->rank(), rank() % tp);
  EXPECT_EQ(groups.at(GroupKind::dp)->size(), size() / tp);
}

TEST_F(Nccl, SizeChecksNameTheCollective) {
  Tensor in = gpu().allocate({4}, DType::fp32), out = gpu().allocate({4 * size() + 1}, DType::fp32);
  try {
    comm().all_gather(stream(), in, out);
    ADD_FAILURE() << "all_gather accepted a wrong output size";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("all_gather on group world"), std::string::npos)
        << e.what();
  }
  EXPECT_THROW(comm().broadcast(stream(), in, size()), std::invalid_argument);
  Tensor ints = gpu().allocate({4 * size()}, DType::int32);
  EXPECT_THROW(comm().reduce_scatter(stream(), ints, in, ReduceOp::sum), std::invalid_argument);
  const std::vector<P2POp> bad{{P2POp::Kind::send, in, size()}};
  EXPECT_THROW(comm().batch_p2p(stream(), bad), std::invalid_argument);
}

}  // namespace
}  // namespace tandem::testing
