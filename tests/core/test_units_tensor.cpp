// Unit types, shapes, tensors and the memory tracker every allocator shares.
#include <gtest/gtest.h>

#include <thread>
#include <vector>

#include "core/device.hpp"
#include "core/memory_tracker.hpp"
#include "core/parallel_context.hpp"
#include "core/tensor.hpp"
#include "core/units.hpp"

namespace tandem {
namespace {

using namespace literals;

TEST(Units, CrossUnitArithmetic) {
  const Seconds t = Bytes(1'000'000'000) / BytesPerSecond(900e9);
  EXPECT_NEAR(t.value, 1.0 / 900, 1e-15);
  EXPECT_DOUBLE_EQ((Flops(312e12) / FlopsPerSecond(312e12)).value, 1.0);
  EXPECT_DOUBLE_EQ((Flops(10.0) / Seconds(2.0)).value, 5.0);
  EXPECT_EQ(2_KiB, Bytes(2048));
  EXPECT_EQ(1_GiB - 512_MiB, 512_MiB);
  EXPECT_DOUBLE_EQ((1.5_ms).value, 1.5e-3);
  EXPECT_LT(1.0_us, 1.0_ms);
}

TEST(Shape, NumelAndPrinting) {
  const Shape s{4, 64, 768};
  EXPECT_EQ(s.rank(), 3u);
  EXPECT_EQ(s.numel(), 4 * 64 * 768);
  EXPECT_EQ(s.to_string(), "(4, 64, 768)");
  EXPECT_EQ(Shape{}.numel(), 1);  // a scalar
  EXPECT_THROW((Shape{2, -1}), std::invalid_argument);
}

// Shapes are held inline (no heap): up to Shape::kMaxRank dimensions, refused beyond; two
// shapes are equal exactly when rank and dimensions are, whatever they were built from.
TEST(Shape, HeldInlineUpToItsMaximumRank) {
  const std::vector<std::int64_t> eight{1, 2, 3, 4, 5, 6, 7, 8};
  const Shape s(eight);
  EXPECT_EQ(s.rank(), Shape::kMaxRank);
  EXPECT_EQ(s.numel(), 40320);
  EXPECT_EQ(s[7], 8);
  EXPECT_THROW((void)s[8], std::out_of_range);
  EXPECT_THROW(Shape(std::vector<std::int64_t>(Shape::kMaxRank + 1, 1)), std::invalid_argument);
  EXPECT_EQ(Shape(std::vector<std::int64_t>{3, 4}), (Shape{3, 4}));
  EXPECT_NE((Shape{3, 4}), (Shape{3, 4, 1}));  // the same elements, another rank
  EXPECT_NE((Shape{3, 4}), (Shape{4, 3}));
  EXPECT_EQ((Shape{3, 0, 5}).numel(), 0);
  const auto d = s.dims();
  EXPECT_EQ(std::vector<std::int64_t>(d.begin(), d.end()), eight);
}

TEST(Tensor, BytesFollowDtype) {
  EXPECT_EQ((Tensor{{2, 3}, DType::fp32, nullptr, 0}.bytes()), Bytes(24));
  EXPECT_EQ((Tensor{{2, 3}, DType::bf16, nullptr, 0}.bytes()), Bytes(12));
  EXPECT_EQ((Tensor{{5}, DType::int64, nullptr, 0}.bytes()), Bytes(40));
}

class VectorStorage : public Storage {
 public:
  explicit VectorStorage(std::size_t n) : data_(n) {}
  void* data() override { return data_.data(); }
  Bytes bytes() const override {
    return Bytes(static_cast<std::int64_t>(data_.size() * sizeof(float)));
  }

 private:
  std::vector<float> data_;
};

TEST(Tensor, PhantomTensorRefusesElementAccess) {
  const Tensor phantom{{8, 8}, DType::fp32, nullptr, 0};
  EXPECT_FALSE(phantom.has_data());
  EXPECT_EQ(phantom.bytes(), Bytes(256));
  EXPECT_THROW(phantom.data<float>(), std::logic_error);
}

TEST(Tensor, ViewsAndTypedAccess) {
  Tensor t{{4, 4}, DType::fp32, std::make_shared<VectorStorage>(16), 0};
  for (int i = 0; i < 16; ++i) t.data<float>()[i] = static_cast<float>(i);
  const Tensor row2 = t.view({4}, 8);
  EXPECT_EQ(row2.data<float>()[0], 8.0f);
  EXPECT_EQ(row2.data<float>()[3], 11.0f);
  EXPECT_THROW(t.view({4}, 13), std::out_of_range);
  EXPECT_THROW(t.data<std::int32_t>(), std::invalid_argument);
}

TEST(CheckGemm, ShapesThatConformGiveMnkAndThoseThatDoNotAreNamed) {
  const Tensor a{{4, 8}, DType::fp32, nullptr, 0};
  const Tensor b{{6, 8}, DType::fp32, nullptr, 0};  // held (N, K): transpose_b
  Tensor c{{4, 6}, DType::fp32, nullptr, 0};
  const GemmShape g = check_gemm({a, b, c, false, true});
  EXPECT_EQ(g.m, 4);
  EXPECT_EQ(g.n, 6);
  EXPECT_EQ(g.k, 8);
  // Without the transpose, K (8 columns of A) meets B's 6 rows: the message names all three.
  try {
    check_gemm({a, b, c});
    FAIL() << "no error";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("gemm: (4, 8) · (6, 8) into (4, 6) do not conform"),
              std::string::npos)
        << e.what();
  }
  const Tensor bias{{5}, DType::fp32, nullptr, 0};
  try {
    check_gemm({a, b, c, false, true, 1.0f, 0.0f, &bias});
    FAIL() << "no error";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("(6, 8)ᵀ into (4, 6): a bias epilogue needs 6 values"),
              std::string::npos)
        << e.what();
  }
}

TEST(MemoryTracker, LiveAndPeak) {
  MemoryTracker m;
  m.on_allocate(100_B);
  m.on_allocate(50_B);
  m.on_release(100_B);
  m.on_allocate(20_B);
  EXPECT_EQ(m.live(), 70_B);
  EXPECT_EQ(m.peak(), 150_B);
  m.reset_peak();
  EXPECT_EQ(m.peak(), 70_B);
  EXPECT_THROW(m.on_release(71_B), std::logic_error);
}

// The bytes of each use live at the high-water mark, kept until a higher mark replaces them.
TEST(MemoryTracker, PeakIsSplitByUse) {
  MemoryTracker m;
  m.on_allocate(100_B, MemoryUse::weights);
  m.on_allocate(50_B);  // activations
  m.on_release(50_B);
  m.on_allocate(30_B, MemoryUse::optimizer);
  const auto at = [&](MemoryUse u) { return m.peak_by_use()[static_cast<std::size_t>(u)]; };
  EXPECT_EQ(m.peak(), 150_B);
  EXPECT_EQ(at(MemoryUse::weights), 100_B);
  EXPECT_EQ(at(MemoryUse::activations), 50_B);
  EXPECT_EQ(at(MemoryUse::optimizer), 0_B);   // allocated after the mark
  m.on_allocate(40_B, MemoryUse::gradients);  // 170: a new mark
  EXPECT_EQ(at(MemoryUse::activations), 0_B);
  EXPECT_EQ(at(MemoryUse::optimizer), 30_B);
  EXPECT_EQ(at(MemoryUse::gradients), 40_B);
  EXPECT_EQ(m.live_by_use()[static_cast<std::size_t>(MemoryUse::weights)], 100_B);
  // Released under another use than it was allocated under: a bookkeeping error.
  EXPECT_THROW(m.on_release(40_B, MemoryUse::fp8), std::logic_error);
  m.reset_peak();
  EXPECT_EQ(at(MemoryUse::gradients), 40_B);
  EXPECT_EQ(memory_use_name(MemoryUse::communication), "communication");
}

TEST(MemoryTracker, ThreadSafe) {
  MemoryTracker m;
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&] {
      for (int i = 0; i < 10000; ++i) {
        m.on_allocate(8_B);
        m.on_release(8_B);
      }
    });
  for (auto& t : threads) t.join();
  EXPECT_EQ(m.live(), 0_B);
  EXPECT_LE(m.peak(), 32_B);
  EXPECT_GE(m.peak(), 8_B);
}

TEST(GroupKind, NamesRoundTrip) {
  for (auto k : kAllGroupKinds) EXPECT_EQ(parse_group_kind(group_kind_name(k)), k);
  EXPECT_EQ(group_kind_name(GroupKind::dp_cp), "dp-cp");
  EXPECT_EQ(group_kind_name(GroupKind::tp_dp_cp), "tp-dp-cp");
  EXPECT_FALSE(parse_group_kind("dp_cp").has_value());
}

}  // namespace
}  // namespace tandem
