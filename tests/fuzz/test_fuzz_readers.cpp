// A bounded, seeded mutation fuzz of every file reader: scenario JSON, topology JSON,
// calibration tables, Megatron .idx/.bin datasets and checkpoints. Each mutant (bit flips,
// truncation, inserted bytes, a number replaced by an extreme value such as 1e308, -1, 0,
// 2^63) is handed to the real reader in this process; the reader must either accept it or
// throw ConfigError (a named field, value and rule). Any other exception fails the test, a
// crash kills it (the sanitizer run of label `unit` turns memory errors and undefined
// behaviour into crashes), and a mutant that takes longer than kSlowSeconds fails it.
// Deterministic: the same seed gives the same mutants on every run.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <functional>
#include <random>
#include <sstream>
#include <string>
#include <typeinfo>
#include <vector>

#include "core/error.hpp"
#include "core/scenario.hpp"
#include "data/indexed_dataset.hpp"
#include "sim/calibration.hpp"
#include "topology/topology_io.hpp"
#include "train/checkpoint.hpp"

namespace tandem {
namespace {

namespace fs = std::filesystem;
using Bytes = std::string;  // file contents, binary-safe

constexpr double kSlowSeconds = 2.0;  // one mutant, sanitizer build included
constexpr int kMutantsPerSeed = 400;

// Values a number in a text file is replaced with: overflow, sign, zero, NaN spellings,
// integer limits, denormals.
const std::vector<std::string> kExtremeNumbers = {"1e308",
                                                  "-1e308",
                                                  "1e309",
                                                  "-1",
                                                  "0",
                                                  "NaN",
                                                  "Infinity",
                                                  "-0",
                                                  "1e-320",
                                                  "0.5",
                                                  "2147483648",
                                                  "-2147483649",
                                                  "4294967296",
                                                  "9223372036854775807",
                                                  "9223372036854775808",
                                                  "18446744073709551616",
                                                  "1e18",
                                                  "-9223372036854775808",
                                                  "3.5",
                                                  "65536"};
// Little-endian 8-byte words a binary field is overwritten with.
const std::vector<std::uint64_t> kExtremeWords = {0,
                                                  1,
                                                  0xFFFFFFFFFFFFFFFFull,
                                                  0x7FFFFFFFFFFFFFFFull,
                                                  0x8000000000000000ull,
                                                  0x80000000ull,
                                                  0xFFFFFFFFull,
                                                  0x100000000ull,
                                                  0x7FFFFFFFull};

Bytes read_bytes(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}
// Removed first: ext4 flushes a file truncated and rewritten in place to disk on close
// (auto_da_alloc), which made each mutant cost tens of milliseconds.
void write_bytes(const fs::path& p, const Bytes& b) {
  std::error_code ec;
  fs::remove(p, ec);
  std::ofstream out(p, std::ios::binary | std::ios::trunc);
  out.write(b.data(), static_cast<std::streamsize>(b.size()));
}

// The spans of `text` that look like JSON numbers.
std::vector<std::pair<std::size_t, std::size_t>> number_spans(const Bytes& text) {
  std::vector<std::pair<std::size_t, std::size_t>> spans;
  std::size_t i = 0;
  while (i < text.size()) {
    const bool starts = std::isdigit(static_cast<unsigned char>(text[i])) ||
                        (text[i] == '-' && i + 1 < text.size() &&
                         std::isdigit(static_cast<unsigned char>(text[i + 1])));
    if (!starts) {
      ++i;
      continue;
    }
    std::size_t j = i + 1;
    while (j < text.size() && (std::isdigit(static_cast<unsigned char>(text[j])) ||
                               std::string_view(".eE+-").find(text[j]) != std::string_view::npos))
      ++j;
    spans.emplace_back(i, j - i);
    i = j;
  }
  return spans;
}

// One mutation of `in`; `binary` chooses word overwrites instead of number replacement.
// `what` receives a description of the mutation for failure messages.
Bytes mutate(const Bytes& in, std::mt19937_64& rng, bool binary, std::string& what) {
  Bytes b = in;
  auto pick = [&](std::size_t n) { return n == 0 ? 0 : static_cast<std::size_t>(rng() % n); };
  switch (rng() % 6) {
    case 0: {  // flip one bit
      if (b.empty()) break;
      const std::size_t at = pick(b.size());
      const int bit = static_cast<int>(rng() % 8);
      b[at] = static_cast<char>(b[at] ^ (1 << bit));
      what = "bit " + std::to_string(bit) + " of byte " + std::to_string(at) + " flipped";
      break;
    }
    case 1: {  // truncate
      const std::size_t keep = pick(b.size() + 1);
      b.resize(keep);
      what = "truncated to " + std::to_string(keep) + " bytes";
      break;
    }
    case 2: {  // insert bytes
      const std::size_t at = pick(b.size() + 1);
      const std::size_t n = 1 + pick(8);
      Bytes extra;
      for (std::size_t i = 0; i < n; ++i) extra.push_back(static_cast<char>(rng() & 0xFF));
      b.insert(at, extra);
      what = std::to_string(n) + " random bytes inserted at " + std::to_string(at);
      break;
    }
    case 3: {  // delete a range
      if (b.empty()) break;
      const std::size_t at = pick(b.size());
      const std::size_t n = 1 + pick(std::min<std::size_t>(16, b.size() - at));
      b.erase(at, n);
      what = std::to_string(n) + " bytes deleted at " + std::to_string(at);
      break;
    }
    default: {  // an extreme value in a field (twice as likely: it reaches the range checks)
      if (binary) {
        if (b.size() < 8) break;
        const std::size_t at = pick(b.size() - 7);
        const std::uint64_t w = kExtremeWords[pick(kExtremeWords.size())];
        for (int i = 0; i < 8; ++i) b[at + i] = static_cast<char>((w >> (8 * i)) & 0xFF);
        what = "8 bytes at " + std::to_string(at) + " set to " + std::to_string(w);
      } else {
        const auto spans = number_spans(b);
        if (spans.empty()) break;
        const auto [at, n] = spans[pick(spans.size())];
        const std::string& v = kExtremeNumbers[pick(kExtremeNumbers.size())];
        what = "number \"" + b.substr(at, n) + "\" at " + std::to_string(at) + " replaced by " + v;
        b.replace(at, n, v);
      }
    }
  }
  return b;
}

struct FuzzStats {
  int mutants = 0, accepted = 0, refused = 0;
  double seconds = 0;
  std::vector<std::string> failures;  // mutant, exception type, message
};

// Runs `read` on one mutant and books the outcome; `allowed` accepts further exception
// types for a reader that documents them.
void run_one(FuzzStats& st, const std::string& what, const std::function<void()>& read,
             const std::function<bool(const std::exception&)>& allowed = {}) {
  const auto t0 = std::chrono::steady_clock::now();
  ++st.mutants;
  try {
    read();
    ++st.accepted;
  } catch (const ConfigError&) {
    ++st.refused;
  } catch (const std::exception& e) {
    if (allowed && allowed(e))
      ++st.refused;
    else
      st.failures.push_back(what + ": threw " + typeid(e).name() + ": " + e.what());
  }
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  st.seconds += s;
  if (s > kSlowSeconds)
    st.failures.push_back(what + ": took " + std::to_string(s) + " s (bound " +
                          std::to_string(kSlowSeconds) + " s)");
}

void report(const std::string& reader, const FuzzStats& st) {
  std::printf("fuzz %-12s %5d mutants: %5d accepted, %5d refused with a named error, %.2f s\n",
              reader.c_str(), st.mutants, st.accepted, st.refused, st.seconds);
  std::string text;
  for (std::size_t i = 0; i < st.failures.size() && i < 20; ++i) text += st.failures[i] + "\n";
  EXPECT_TRUE(st.failures.empty()) << st.failures.size() << " mutant(s) of " << reader
                                   << " were not refused with a named error:\n"
                                   << text;
}

class FuzzReaders : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("tandem-fuzz-" + std::to_string(::getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }

  // Mutates each seed file kMutantsPerSeed times, writes the mutant to `path` and calls
  // `read(path)`.
  FuzzStats fuzz_text_files(const std::vector<fs::path>& seeds, std::uint64_t seed,
                            const std::function<void(const fs::path&)>& read,
                            int mutants_per_seed = kMutantsPerSeed) {
    FuzzStats st;
    std::mt19937_64 rng(seed);
    const fs::path path = dir_ / "mutant.json";
    for (const auto& s : seeds) {
      const Bytes original = read_bytes(s);
      EXPECT_FALSE(original.empty()) << s;
      for (int i = 0; i < mutants_per_seed; ++i) {
        std::string what = "unchanged";
        Bytes m = mutate(original, rng, false, what);
        // A second mutation now and then: values out of range behind a broken byte.
        if (rng() % 4 == 0) m = mutate(m, rng, false, what);
        write_bytes(path, m);
        run_one(st, s.filename().string() + " #" + std::to_string(i) + " (" + what + ")",
                [&] { read(path); });
      }
    }
    return st;
  }

  fs::path dir_;
};

std::vector<fs::path> json_files(const fs::path& folder) {
  std::vector<fs::path> out;
  for (const auto& e : fs::directory_iterator(folder))
    if (e.path().extension() == ".json") out.push_back(e.path());
  std::sort(out.begin(), out.end());
  return out;
}

const fs::path kRoot = TANDEM_SOURCE_DIR;

TEST_F(FuzzReaders, ScenarioFiles) {
  auto seeds = json_files(kRoot / "scenarios");
  const auto published = json_files(kRoot / "scenarios" / "published");
  seeds.insert(seeds.end(), published.begin(),
               published.begin() + std::min<std::size_t>(3, published.size()));
  ASSERT_GE(seeds.size(), 5u);
  for (const auto& s : seeds) validate(load_scenario(s));  // the seeds themselves are valid
  const FuzzStats st = fuzz_text_files(seeds, 11, [](const fs::path& p) {
    const Scenario s = load_scenario(p);
    validate(s);
    // What every command derives from a validated scenario.
    (void)data_parallel_size(s);
    (void)virtual_pipeline_size(s);
    (void)padded_vocab_size(s);
    (void)ffn_hidden_size(s);
    (void)parallel_sizes(s);
    (void)effective_pipeline_schedule(s);
  });
  report("scenario", st);
  EXPECT_GT(st.refused, 0);  // the mutations do reach the checks
}

TEST_F(FuzzReaders, TopologyFiles) {
  const auto seeds = json_files(kRoot / "topology" / "presets");
  ASSERT_GE(seeds.size(), 2u);
  for (const auto& s : seeds) load_topology_file(s);
  const FuzzStats st =
      fuzz_text_files(seeds, 22, [](const fs::path& p) { (void)load_topology_file(p); });
  report("topology", st);
  EXPECT_GT(st.refused, 0);
}

TEST_F(FuzzReaders, CalibrationTables) {
  const fs::path seed = dir_ / "seed-calibration.json";
  // A small table of the shape tandem calibrate writes: a GEMM and a roofline op.
  write_bytes(seed, R"({"gpu": "A100-SXM4-80GB", "source": "fuzz seed",
 "rows": [{"op": "gemm", "dtype": "bf16", "m": 4096, "n": 4096, "k": 4096, "batch": 1,
           "seconds": 0.00052, "flops": 1.37e11, "bytes": 1.0e8},
          {"op": "gelu", "dtype": "bf16", "m": 8192, "n": 16384, "k": 0, "batch": 1,
           "seconds": 0.00031, "flops": 1.3e9, "bytes": 5.4e8}]})");
  sim::load_calibration(seed);
  const FuzzStats st = fuzz_text_files(
      {seed}, 33, [](const fs::path& p) { (void)sim::load_calibration(p); }, 4 * kMutantsPerSeed);
  report("calibration", st);
  EXPECT_GT(st.refused, 0);
}

TEST_F(FuzzReaders, IndexedDatasets) {
  const fs::path prefix = dir_ / "seed";
  {
    data::IndexedDatasetWriter w(prefix, data::TokenDType::uint16);
    const std::vector<std::int32_t> doc1 = {5, 6, 7, 8, 9, 10, 11};
    const std::vector<std::int32_t> doc2 = {1, 2, 3, 4, 5};
    const std::vector<std::int32_t> lengths2 = {2, 3};
    w.add_document(doc1);
    w.add_document(doc2, lengths2);
    w.finalize();
  }
  const Bytes idx = read_bytes(data::idx_path(prefix)), bin = read_bytes(data::bin_path(prefix));
  ASSERT_EQ(data::IndexedDataset(prefix).document_count(), 2);
  // Also an int64 dataset: tokens that do not fit int32 are reachable only there.
  const fs::path wide = dir_ / "wide";
  {
    data::IndexedDatasetWriter w(wide, data::TokenDType::int64);
    const std::vector<std::int32_t> doc = {100, 200, 300, 400};
    w.add_document(doc);
    w.finalize();
  }
  const Bytes wide_idx = read_bytes(data::idx_path(wide)),
              wide_bin = read_bytes(data::bin_path(wide));

  FuzzStats st;
  std::mt19937_64 rng(44);
  const fs::path m = dir_ / "mutant";
  for (int i = 0; i < 4 * kMutantsPerSeed; ++i) {
    const bool use_wide = i % 2 == 1;
    const bool mutate_idx = rng() % 4 != 0;  // the index holds the structure
    std::string what = "unchanged";
    const Bytes& src_idx = use_wide ? wide_idx : idx;
    const Bytes& src_bin = use_wide ? wide_bin : bin;
    write_bytes(data::idx_path(m), mutate_idx ? mutate(src_idx, rng, true, what) : src_idx);
    write_bytes(data::bin_path(m), mutate_idx ? src_bin : mutate(src_bin, rng, true, what));
    run_one(
        st,
        std::string(use_wide ? "int64" : "uint16") + (mutate_idx ? " .idx #" : " .bin #") +
            std::to_string(i) + " (" + what + ")",
        [&] {
          const data::IndexedDataset ds(m);
          for (std::int64_t s = 0; s < static_cast<std::int64_t>(ds.sequence_lengths().size()); ++s)
            (void)ds.get(s);
        },
        // read_tokens documents std::out_of_range for a token of a wide dtype that does not
        // fit int32: the .bin itself is well formed, the value is what is out of range.
        [](const std::exception& e) {
          return dynamic_cast<const std::out_of_range*>(&e) &&
                 std::string(e.what()).find("does not fit int32") != std::string::npos;
        });
  }
  report("idx/bin", st);
  EXPECT_GT(st.refused, 0);
}

TEST_F(FuzzReaders, Checkpoints) {
  const fs::path ckpt = dir_ / "ckpt";
  CheckpointState state;
  state.iteration = 3;
  state.consumed_samples = 24;
  state.optimizer_steps = 3;
  state.rank = 0;
  state.world_size = 1;
  state.scenario = to_json(default_scenario());
  state.tensors = {{"params", {1.0f, -2.0f, 3.5f, 0.25f}}, {"exp_avg", {0.1f, 0.2f}}};
  save_checkpoint(ckpt, state);
  const fs::path file = checkpoint_file(ckpt, 3, 0);
  const Bytes original = read_bytes(file);
  ASSERT_EQ(load_checkpoint(ckpt, 3, 0).tensors.size(), 2u);

  FuzzStats st;
  std::mt19937_64 rng(55);
  for (int i = 0; i < 4 * kMutantsPerSeed; ++i) {
    std::string what = "unchanged";
    // Text mutations reach the JSON header's numbers, binary ones the fixed fields.
    write_bytes(file, mutate(original, rng, i % 2 == 0, what));
    run_one(st, "checkpoint #" + std::to_string(i) + " (" + what + ")",
            [&] { (void)load_checkpoint(ckpt, 3, 0); });
  }
  report("checkpoint", st);
  EXPECT_GT(st.refused, 0);
}

}  // namespace
}  // namespace tandem
