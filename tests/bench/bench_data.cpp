// How long a GPTDataset takes to build its indices over Megatron's mock data (100000
// sequences of 1 … 4095 tokens, 205 M tokens): what every rank of a --mock-data run pays
// before its first step. At seq_length 32 that is 6.4 M samples. The sample index as
// helpers.cpp stores it (16 bytes a sample) against the documents' starts GptDataset
// searches instead, and the shuffle index in int64 against uint32, in one run (A B A B).
#include <benchmark/benchmark.h>

#include <cstdint>
#include <memory>
#include <numeric>

#include "data/gpt_dataset.hpp"
#include "data/gpt_indices.hpp"
#include "data/mock_dataset.hpp"

namespace tandem::data {
namespace {

std::shared_ptr<const MockTokenSource> mock_source() {
  static const auto source =
      std::make_shared<const MockTokenSource>(MockDataConfig{.vocab_size = 512, .eod = 511});
  return source;
}

struct Indices {
  EpochPlan plan;
  std::vector<std::int32_t> document_index;
};

Indices document_index(std::int64_t sequence_length) {
  const auto sizes = mock_source()->sequence_lengths();
  const std::int64_t tokens = std::accumulate(sizes.begin(), sizes.end(), std::int64_t{0});
  Indices out{.plan = plan_epochs(tokens, 1000, sequence_length), .document_index = {}};
  IndexRng rng(1234);
  out.document_index =
      build_document_index({0, static_cast<std::int64_t>(sizes.size())}, out.plan, rng);
  return out;
}

void BM_GptDatasetOverMockData(benchmark::State& state) {
  const auto source = mock_source();
  const auto range = SequenceRange{0, static_cast<std::int64_t>(source->sequence_lengths().size())};
  std::int64_t samples = 0;
  for (auto _ : state) {
    const GptDataset ds(source, range, 1000, Split::train,
                        {.sequence_length = state.range(0), .random_seed = 1234});
    samples = ds.size();
    benchmark::DoNotOptimize(samples);
  }
  state.counters["samples"] = static_cast<double>(samples);
}
BENCHMARK(BM_GptDatasetOverMockData)->Arg(32)->Arg(1024)->Unit(benchmark::kMillisecond);

// arg 0: helpers.cpp's stored rows; 1: the documents' starts (what GptDataset keeps).
void BM_SampleIndex(benchmark::State& state) {
  const Indices in = document_index(32);
  const auto sizes = mock_source()->sequence_lengths();
  for (auto _ : state) {
    if (state.range(0) == 0) {
      const auto rows = build_sample_index(sizes, in.document_index, 32, in.plan);
      benchmark::DoNotOptimize(rows.data());
    } else {
      const DocumentStarts starts(sizes, in.document_index);
      benchmark::DoNotOptimize(starts.tokens());
    }
  }
}
BENCHMARK(BM_SampleIndex)->Arg(0)->Arg(1)->Arg(0)->Arg(1)->Unit(benchmark::kMillisecond);

// arg 0: int64 entries; 1: uint32 (where the samples fit); the same permutation.
void BM_ShuffleIndex(benchmark::State& state) {
  const Indices in = document_index(32);
  const std::int64_t samples = num_samples_in(in.plan, 32);
  for (auto _ : state) {
    IndexRng rng(1234);
    if (state.range(0) == 0) {
      const auto index = build_shuffle_index<std::int64_t>(samples, in.plan, rng);
      benchmark::DoNotOptimize(index.data());
    } else {
      const auto index = build_shuffle_index<std::uint32_t>(samples, in.plan, rng);
      benchmark::DoNotOptimize(index.data());
    }
  }
  state.counters["samples"] = static_cast<double>(samples);
}
BENCHMARK(BM_ShuffleIndex)->Arg(0)->Arg(1)->Arg(0)->Arg(1)->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace tandem::data
