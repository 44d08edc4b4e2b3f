// How fast the schedule layer builds op lists, rank layouts and idealised timelines at
// the sizes the simulator meets (GPT-3 175B on 1536 GPUs: pp 16, vpp 6, m 128; 1T on
// 3072 GPUs: pp 64, m 512). Counters: ops per second.
#include <benchmark/benchmark.h>

#include "schedules/layout.hpp"
#include "schedules/timeline.hpp"

namespace tandem {
namespace {

std::int64_t count_ops(const Schedule& s) {
  std::int64_t n = 0;
  for (const auto& r : s.ranks) n += static_cast<std::int64_t>(r.size());
  return n;
}

void BM_MakeSchedule(benchmark::State& state) {
  const ScheduleSpec spec{
      static_cast<int>(state.range(1)) > 1 ? ScheduleKind::interleaved : ScheduleKind::one_f_one_b,
      static_cast<int>(state.range(0)), static_cast<int>(state.range(1)),
      static_cast<int>(state.range(2))};
  std::int64_t ops = 0;
  for (auto _ : state) {
    const auto s = make_schedule(spec);
    ops += count_ops(s);
    benchmark::DoNotOptimize(s);
  }
  state.counters["ops/s"] =
      benchmark::Counter(static_cast<double>(ops), benchmark::Counter::kIsRate);
}
BENCHMARK(BM_MakeSchedule)
    ->Args({16, 6, 128})
    ->Args({64, 1, 512})
    ->Args({8, 1, 64})
    ->Unit(benchmark::kMillisecond);

void BM_IdealTimeline(benchmark::State& state) {
  const ScheduleSpec spec{
      static_cast<int>(state.range(1)) > 1 ? ScheduleKind::interleaved : ScheduleKind::one_f_one_b,
      static_cast<int>(state.range(0)), static_cast<int>(state.range(1)),
      static_cast<int>(state.range(2))};
  const auto s = make_schedule(spec);
  for (auto _ : state) benchmark::DoNotOptimize(make_timeline(s, {}));
  state.counters["ops/s"] = benchmark::Counter(
      static_cast<double>(count_ops(s)) * static_cast<double>(state.iterations()),
      benchmark::Counter::kIsRate);
}
BENCHMARK(BM_IdealTimeline)
    ->Args({16, 6, 128})
    ->Args({64, 1, 512})
    ->Args({8, 1, 64})
    ->Unit(benchmark::kMillisecond);

void BM_MakeLayout(benchmark::State& state) {
  const LayoutSpec spec{static_cast<int>(state.range(0)), 8, static_cast<int>(state.range(1)), 1,
                        1};
  for (auto _ : state) benchmark::DoNotOptimize(make_layout(spec));
}
BENCHMARK(BM_MakeLayout)->Args({1536, 16})->Args({3072, 64})->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace tandem
