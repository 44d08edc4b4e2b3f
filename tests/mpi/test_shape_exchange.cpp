// Megatron's variable_seq_lengths over a real 2-stage pipeline (2 MPI ranks): a stage
// program whose activations differ in shape from microbatch to microbatch (rows = 2 + mb,
// and a chunk-dependent width) runs 1F1B and interleaved schedules with the step
// interpreter exchanging shapes before every p2p batch. Its activation_shape throws, so
// every receive buffer must come from a received shape; each stage checks the shape and
// the values of every activation and gradient it receives, also with the interleaved
// schedule's calls overlapped (overlap_p2p_comm).
#include <gtest/gtest.h>

#include <map>
#include <stdexcept>

#include "exec/cpu/cpu_device.hpp"
#include "schedules/step_interpreter.hpp"
#include "tests/mpi/mpi_test_support.hpp"

namespace tandem {
namespace {

// Activation of (microbatch, sending virtual stage): (2 + mb, 3 + stage) holding
// 1000·stage + 100·mb + i; its gradient is the negation.
class RaggedProgram final : public StageProgram {
 public:
  RaggedProgram(CpuDevice& device, int pp_rank, int pp, int vpp)
      : device_(device), pp_rank_(pp_rank), pp_(pp), vpp_(vpp) {}

  Tensor forward(int mb, int chunk, const Tensor& input) override {
    const int stage = chunk * pp_ + pp_rank_;  // virtual stage
    if (stage > 0) check(input, mb, stage - 1, 1.0f, "activation");
    ++forwards_;
    if (stage == pp_ * vpp_ - 1) return Tensor{};
    return make(mb, stage, 1.0f);
  }
  Tensor backward(int mb, int chunk, const Tensor& grad_output) override {
    const int stage = chunk * pp_ + pp_rank_;
    if (stage < pp_ * vpp_ - 1) check(grad_output, mb, stage, -1.0f, "gradient");
    ++backwards_;
    if (stage == 0) return Tensor{};
    return make(mb, stage - 1, -1.0f);
  }
  Shape activation_shape(int) const override {
    throw std::logic_error("activation_shape asked although shapes are exchanged");
  }
  DType activation_dtype() const override { return DType::fp32; }

  int forwards_ = 0, backwards_ = 0;

 private:
  static Shape shape_of(int mb, int stage) { return Shape{2 + mb, 3 + stage}; }
  Tensor make(int mb, int stage, float sign) {
    Tensor t = device_.allocate(shape_of(mb, stage), DType::fp32);
    for (std::int64_t i = 0; i < t.numel(); ++i)
      t.data<float>()[i] = sign * static_cast<float>(1000 * stage + 100 * mb + i);
    return t;
  }
  void check(const Tensor& t, int mb, int stage, float sign, const char* what) const {
    ASSERT_EQ(t.shape, shape_of(mb, stage)) << what << " of microbatch " << mb;
    for (std::int64_t i = 0; i < t.numel(); ++i)
      ASSERT_EQ(t.data<float>()[i], sign * static_cast<float>(1000 * stage + 100 * mb + i))
          << what << " of microbatch " << mb << " element " << i;
  }

  CpuDevice& device_;
  int pp_rank_, pp_, vpp_;
};

void run(ScheduleKind kind, int vpp, int microbatches, bool overlap_p2p_comm = false) {
  auto& pp = testing::world();
  ASSERT_EQ(pp.size(), 2);
  CpuDevice device;
  RaggedProgram program(device, pp.rank(), pp.size(), vpp);
  ScheduleSpec spec{kind, pp.size(), vpp, microbatches};
  spec.overlap_p2p_comm = overlap_p2p_comm;
  StepContext ctx{device, device.default_stream(), pp, true};
  run_schedule(make_rank_schedule(spec, pp.rank()), program, ctx);
  EXPECT_EQ(program.forwards_, microbatches * vpp);
  EXPECT_EQ(program.backwards_, microbatches * vpp);
}

TEST(ShapeExchange, OneFOneBWithShapesThatVaryPerMicrobatch) {
  run(ScheduleKind::one_f_one_b, 1, 5);
}

TEST(ShapeExchange, InterleavedWithShapesThatVaryPerMicrobatchAndChunk) {
  run(ScheduleKind::interleaved, 2, 4);
}

// overlap_p2p_comm: the calls are posted after each pass and waited for before the next of
// their direction; every tensor still arrives with its shape and values, at its wait.
TEST(ShapeExchange, InterleavedWithOverlappedCallsDeliversEveryTensorAtItsWait) {
  run(ScheduleKind::interleaved, 2, 4, true);
  run(ScheduleKind::interleaved, 3, 6, true);
}

}  // namespace
}  // namespace tandem
