// Column- and row-parallel linear layers sharded over real MPI tensor-parallel groups (the
// 4-rank world, and its two 2-rank halves), with and without sequence parallelism, against
// the unsharded layer computed here in double: forward outputs, input gradients, weight
// and bias gradients, each compared on this rank's shard. Rows are sequence-first, so a
// sequence-parallel shard is the rank's contiguous block of rows.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "exec/cpu/cpu_device.hpp"
#include "model/tensor_parallel.hpp"
#include "tests/mpi/mpi_test_support.hpp"

namespace tandem {
namespace {

constexpr std::int64_t kRows = 8, kIn = 12, kOut = 16;  // rows = T·B = 4·2

std::vector<float> seeded(std::int64_t n, unsigned seed) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<float> v(static_cast<std::size_t>(n));
  for (auto& x : v) x = u(gen);
  return v;
}

// The unsharded layer y = x·wᵀ + b and its gradients for the upstream gradient dy, in double.
struct Reference {
  std::vector<double> y, dx, dw, db;  // (rows, out), (rows, in), (out, in), (out)
};

Reference reference(const std::vector<float>& x, const std::vector<float>& w,
                    const std::vector<float>& b, const std::vector<float>& dy) {
  Reference r{std::vector<double>(kRows * kOut), std::vector<double>(kRows * kIn),
              std::vector<double>(kOut * kIn), std::vector<double>(kOut)};
  for (std::int64_t i = 0; i < kRows; ++i)
    for (std::int64_t o = 0; o < kOut; ++o) {
      double s = b[o];
      for (std::int64_t k = 0; k < kIn; ++k) s += double{x[i * kIn + k]} * w[o * kIn + k];
      r.y[i * kOut + o] = s;
      const double g = dy[i * kOut + o];
      r.db[o] += g;
      for (std::int64_t k = 0; k < kIn; ++k) {
        r.dx[i * kIn + k] += g * w[o * kIn + k];
        r.dw[o * kIn + k] += g * x[i * kIn + k];
      }
    }
  return r;
}

// Rows [r0, r0 + n) and columns [c0, c0 + m) of a row-major (·, cols) matrix.
std::vector<double> block(const std::vector<double>& a, std::int64_t cols, std::int64_t r0,
                          std::int64_t n, std::int64_t c0, std::int64_t m) {
  std::vector<double> out;
  for (std::int64_t i = r0; i < r0 + n; ++i)
    for (std::int64_t j = c0; j < c0 + m; ++j) out.push_back(a[i * cols + j]);
  return out;
}
std::vector<double> block(const std::vector<float>& a, std::int64_t cols, std::int64_t r0,
                          std::int64_t n, std::int64_t c0, std::int64_t m) {
  return block(std::vector<double>(a.begin(), a.end()), cols, r0, n, c0, m);
}

void expect_near(const Tensor& got, const std::vector<double>& want, const char* what) {
  ASSERT_EQ(got.numel(), static_cast<std::int64_t>(want.size())) << what;
  for (std::size_t i = 0; i < want.size(); ++i)
    ASSERT_NEAR(got.data<float>()[i], want[i], 1e-4 * (1 + std::abs(want[i])))
        << what << " element " << i;
}

Tensor upload(CpuDevice& d, const std::vector<double>& v, std::int64_t rows, std::int64_t cols) {
  Tensor t = d.allocate(Shape{rows, cols}, DType::fp32);
  for (std::size_t i = 0; i < v.size(); ++i) t.data<float>()[i] = static_cast<float>(v[i]);
  return t;
}

struct Case {
  bool split;  // two 2-rank groups instead of the 4-rank world
  bool sequence_parallel;
};

class TpLayers : public ::testing::TestWithParam<Case> {
 protected:
  void SetUp() override {
    auto& world = testing::world();
    ASSERT_EQ(world.size(), 4);
    if (GetParam().split) owned_ = world.split_mpi(world.rank() / 2, world.rank(), "tp");
    tp_ = owned_ ? owned_.get() : &world;
  }
  // Parameters w (kOut, kIn) sharded as `kind`, and a bias (kOut) sharded as `bias_kind`.
  ParameterSet make_params(ShardKind kind, ShardKind bias_kind) {
    ParameterSet p(tp_->size(), tp_->rank());
    p.add({"w", Shape{kOut, kIn}, kind, 0, 0, true, false});
    p.add({"b", Shape{kOut}, bias_kind, 0, 0, false, false});
    p.allocate(device_);
    std::vector<float> shard;
    extract_shard(p[0].spec, tp_->size(), tp_->rank(), w_, shard);
    std::copy(shard.begin(), shard.end(), p[0].value.data<float>());
    extract_shard(p[1].spec, tp_->size(), tp_->rank(), b_, shard);
    std::copy(shard.begin(), shard.end(), p[1].value.data<float>());
    device_.fill(device_.default_stream(), p.grads(), 0.0f);
    return p;
  }

  CpuDevice device_;
  std::unique_ptr<MpiCommunicator> owned_;
  Communicator* tp_ = nullptr;
  std::vector<float> x_ = seeded(kRows * kIn, 1), w_ = seeded(kOut * kIn, 2), b_ = seeded(kOut, 3),
                     dy_ = seeded(kRows * kOut, 4);
  Reference ref_ = reference(x_, w_, b_, dy_);
};

TEST_P(TpLayers, ColumnParallelMatchesTheUnshardedLayer) {
  const bool sp = GetParam().sequence_parallel;
  ModelEnv env{device_, device_.default_stream(), *tp_, sp};
  ParameterSet p = make_params(ShardKind::rows, ShardKind::rows);
  const std::int64_t n = tp_->size(), r = tp_->rank(), out = kOut / n, rows = kRows / n;
  // Input: whole sequences, or this rank's sequence shard.
  const Tensor x = sp ? upload(device_, block(x_, kIn, r * rows, rows, 0, kIn), rows, kIn)
                      : upload(device_, block(x_, kIn, 0, kRows, 0, kIn), kRows, kIn);
  Tensor y = column_parallel_forward(env, x, p[0], &p[1]);
  expect_near(y, block(ref_.y, kOut, 0, kRows, r * out, out), "column-parallel output");
  const Tensor dy = upload(device_, block(dy_, kOut, 0, kRows, r * out, out), kRows, out);
  Tensor dx = column_parallel_backward(env, x, dy, p[0], &p[1]);
  expect_near(dx, sp ? block(ref_.dx, kIn, r * rows, rows, 0, kIn) : ref_.dx, "input gradient");
  expect_near(p[0].grad, block(ref_.dw, kIn, r * out, out, 0, kIn), "weight gradient");
  expect_near(p[1].grad, block(ref_.db, 1, r * out, out, 0, 1), "bias gradient");
}

TEST_P(TpLayers, RowParallelMatchesTheUnshardedLayer) {
  const bool sp = GetParam().sequence_parallel;
  ModelEnv env{device_, device_.default_stream(), *tp_, sp};
  ParameterSet p = make_params(ShardKind::columns, ShardKind::replicated);
  const std::int64_t n = tp_->size(), r = tp_->rank(), in = kIn / n, rows = kRows / n;
  const Tensor x = upload(device_, block(x_, kIn, 0, kRows, r * in, in), kRows, in);
  Tensor y = row_parallel_forward(env, x, p[0], &p[1]);
  expect_near(y, sp ? block(ref_.y, kOut, r * rows, rows, 0, kOut) : ref_.y, "row-parallel output");
  const Tensor dy = sp ? upload(device_, block(dy_, kOut, r * rows, rows, 0, kOut), rows, kOut)
                       : upload(device_, block(dy_, kOut, 0, kRows, 0, kOut), kRows, kOut);
  Tensor dx = row_parallel_backward(env, x, dy, p[0], &p[1]);
  expect_near(dx, block(ref_.dx, kIn, 0, kRows, r * in, in), "input gradient");
  expect_near(p[0].grad, block(ref_.dw, kIn, 0, kOut, r * in, in), "weight gradient");
  if (!sp) {
    expect_near(p[1].grad, ref_.db, "bias gradient");
    return;
  }
  // Sequence parallel: the bias gradient covers this rank's rows; over tp it sums to the
  // whole (what the trainer's all-reduce of sequence-parallel gradients does).
  std::vector<double> partial(kOut, 0.0);
  for (std::int64_t i = r * rows; i < (r + 1) * rows; ++i)
    for (std::int64_t o = 0; o < kOut; ++o) partial[o] += dy_[i * kOut + o];
  expect_near(p[1].grad, partial, "bias gradient of the shard");
  tp_->all_reduce(env.stream, p[1].grad, ReduceOp::sum)->wait();
  expect_near(p[1].grad, ref_.db, "bias gradient summed over tp");
}

INSTANTIATE_TEST_SUITE_P(Mpi, TpLayers,
                         ::testing::Values(Case{false, false}, Case{false, true}, Case{true, false},
                                           Case{true, true}),
                         [](const auto& param_info) {
                           return std::string(param_info.param.split ? "tp2" : "tp4") +
                                  (param_info.param.sequence_parallel ? "_sp" : "");
                         });

}  // namespace
}  // namespace tandem
