#include "core/pipeline_layout.hpp"

#include <algorithm>
#include <cctype>
#include <stdexcept>

namespace tandem {
namespace {

// Reads the decimal count after "*" at `i`: its value and where it ends, or {-1, i}.
std::pair<long long, std::size_t> count_after_star(const std::string& t, std::size_t i) {
  if (i >= t.size() || t[i] != '*') return {-1, i};
  std::size_t j = i + 1;
  long long n = 0;
  while (j < t.size() && std::isdigit(static_cast<unsigned char>(t[j]))) {
    n = std::min<long long>(n * 10 + (t[j] - '0'), 1'000'000'000);
    ++j;
  }
  return j == i + 1 ? std::pair<long long, std::size_t>{-1, i} : std::pair{n, j};
}

// Megatron unrolls "(group)*n" (the group holding no ')') first, then "x*n" for any one
// character, each as one left-to-right pass of non-overlapping matches.
std::string unroll_groups(const std::string& t, std::string& error) {
  std::string out;
  std::size_t i = 0;
  while (i < t.size()) {
    const std::size_t close = t[i] == '(' ? t.find(')', i + 1) : std::string::npos;
    if (close != std::string::npos && close > i + 1) {
      const auto [n, end] = count_after_star(t, close + 1);
      if (n >= 0) {
        const std::string group = t.substr(i + 1, close - i - 1);
        if (static_cast<double>(n) * static_cast<double>(group.size()) > 1e6) {
          error = "repeats \"(" + group + ")\" " + std::to_string(n) + " times: too long";
          return {};
        }
        for (long long k = 0; k < n; ++k) out += group;
        i = end;
        continue;
      }
    }
    out += t[i++];
  }
  return out;
}

std::string unroll_symbols(const std::string& t, std::string& error) {
  std::string out;
  std::size_t i = 0;
  while (i < t.size()) {
    const auto [n, end] = count_after_star(t, i + 1);
    if (n >= 0) {
      if (n > 1'000'000) {
        error = std::string("repeats '") + t[i] + "' " + std::to_string(n) + " times: too long";
        return {};
      }
      out.append(static_cast<std::size_t>(n), t[i]);
      i = end;
      continue;
    }
    out += t[i++];
  }
  return out;
}

std::vector<ChunkPlan> from_layout(const Scenario& s, int pp) {
  const ParsedLayout parsed = parse_pipeline_layout(*s.parallelism.pipeline_model_parallel_layout);
  if (!parsed.error.empty()) throw std::invalid_argument(parsed.error);
  const auto stages = static_cast<int>(parsed.stages.size());
  if (stages % pp != 0)
    throw std::invalid_argument("pipeline_model_parallel_layout: " + std::to_string(stages) +
                                " stages do not divide among " + std::to_string(pp) + " pp ranks");
  std::vector<ChunkPlan> plans;
  int next = 0;
  for (int v = 0; v < stages; ++v) {
    const std::string& st = parsed.stages[static_cast<std::size_t>(v)];
    const int layers = static_cast<int>(std::count(st.begin(), st.end(), 't'));
    plans.push_back({next, layers, st.find('E') != std::string::npos,
                     st.find('L') != std::string::npos,
                     static_cast<int>(std::count(st.begin(), st.end(), 'm'))});
    next += layers;
  }
  return plans;
}

// Layers per pp rank with decoder_first/last_pipeline_num_layers: the given counts on the
// first / last rank, the rest split evenly over the others.
std::vector<int> uneven_rank_layers(const Scenario& s, int pp) {
  const auto& p = s.parallelism;
  const auto& first = p.decoder_first_pipeline_num_layers;
  const auto& last = p.decoder_last_pipeline_num_layers;
  const int middle_ranks = pp - (first ? 1 : 0) - (last ? 1 : 0);
  const int middle_layers = s.model.num_layers - first.value_or(0) - last.value_or(0);
  if (middle_ranks < 0 || middle_layers < 0 || (middle_ranks == 0) != (middle_layers == 0) ||
      (middle_ranks > 0 && middle_layers % middle_ranks != 0))
    throw std::invalid_argument("decoder_first/last_pipeline_num_layers leave " +
                                std::to_string(middle_layers) + " layers for " +
                                std::to_string(middle_ranks) + " middle pipeline ranks");
  std::vector<int> per(static_cast<std::size_t>(pp),
                       middle_ranks > 0 ? middle_layers / middle_ranks : 0);
  if (first) per.front() = *first;
  if (last) per.back() = *last;
  return per;
}

}  // namespace

ParsedLayout parse_pipeline_layout(std::string_view text) {
  ParsedLayout out;
  std::string t;
  for (char c : text)
    if (c != ',') t += c;  // purely cosmetic, as in Megatron
  t = unroll_groups(t, out.error);
  if (out.error.empty()) t = unroll_symbols(t, out.error);
  if (!out.error.empty()) return out;
  out.stages.emplace_back();
  for (char c : t) {
    if (c == '|') {
      out.stages.emplace_back();
    } else if (c == 'E' || c == 't' || c == 'm' || c == 'L') {
      out.stages.back() += c;
    } else {
      out.error = std::string("has unknown symbol '") + c + "' in stage " +
                  std::to_string(out.stages.size() - 1) +
                  " (the symbols are E embedding, t transformer layer, m MTP layer, L loss, "
                  "| stage boundary, (…)*n and x*n repetition)";
      out.stages.clear();
      return out;
    }
  }
  return out;
}

std::vector<ChunkPlan> pipeline_partition(const Scenario& s) {
  const auto& p = s.parallelism;
  const int pp = p.pipeline_model_parallel_size, vpp = virtual_pipeline_size(s);
  const int layers = s.model.num_layers;
  if (pp < 1 || vpp < 1) throw std::invalid_argument("pipeline sizes must be positive");
  if (p.pipeline_model_parallel_layout) return from_layout(s, pp);

  // Layers per pp rank, before the embedding and loss are taken out.
  std::vector<int> per_rank;
  const int extra = (p.account_for_embedding_in_pipeline_split ? 1 : 0) +
                    (p.account_for_loss_in_pipeline_split ? 1 : 0);
  if (p.decoder_first_pipeline_num_layers || p.decoder_last_pipeline_num_layers) {
    per_rank = uneven_rank_layers(s, pp);
  } else {
    if ((layers + extra) % pp != 0)
      throw std::invalid_argument("num_layers (+ embedding / loss) " +
                                  std::to_string(layers + extra) + " is not divisible by pp " +
                                  std::to_string(pp));
    per_rank.assign(static_cast<std::size_t>(pp), (layers + extra) / pp);
  }
  std::vector<ChunkPlan> plans(static_cast<std::size_t>(pp * vpp));
  for (int r = 0; r < pp; ++r) {
    const int n = per_rank[static_cast<std::size_t>(r)];
    if (n % vpp != 0)
      throw std::invalid_argument("pp rank " + std::to_string(r) + "'s " + std::to_string(n) +
                                  " layers do not split into " + std::to_string(vpp) + " chunks");
    for (int c = 0; c < vpp; ++c) plans[static_cast<std::size_t>(c * pp + r)].num_layers = n / vpp;
  }
  plans.front().pre_process = true;
  plans.back().post_process = true;
  plans.back().mtp_layers = mtp_depths(s.model);  // Megatron: MTP on the last stage
  if (p.account_for_embedding_in_pipeline_split) --plans.front().num_layers;
  if (p.account_for_loss_in_pipeline_split) --plans.back().num_layers;
  int next = 0;
  for (auto& plan : plans) {
    if (plan.num_layers < 0)
      throw std::invalid_argument("a chunk is left with fewer than zero layers");
    plan.first_layer = next;
    next += plan.num_layers;
  }
  if (next != layers)
    throw std::invalid_argument("the partition holds " + std::to_string(next) +
                                " layers, not num_layers " + std::to_string(layers));
  return plans;
}

ChunkPlan plan_chunk(const Scenario& s, int pp_rank, int chunk) {
  const int pp = s.parallelism.pipeline_model_parallel_size;
  const auto plans = pipeline_partition(s);
  const auto v = static_cast<std::size_t>(chunk * pp + pp_rank);
  if (pp_rank < 0 || pp_rank >= pp || chunk < 0 || v >= plans.size())
    throw std::out_of_range("plan_chunk: no chunk " + std::to_string(chunk) + " of pp rank " +
                            std::to_string(pp_rank));
  return plans[v];
}

int stage_num_layers(const Scenario& s, int pp_rank) {
  const int pp = s.parallelism.pipeline_model_parallel_size;
  const auto plans = pipeline_partition(s);
  int n = 0;
  for (std::size_t v = static_cast<std::size_t>(pp_rank); v < plans.size();
       v += static_cast<std::size_t>(pp))
    n += plans[v].num_layers;
  return n;
}

bool uneven_pipeline(const Scenario& s) {
  const auto& p = s.parallelism;
  return p.pipeline_model_parallel_layout || p.decoder_first_pipeline_num_layers ||
         p.decoder_last_pipeline_num_layers || p.account_for_embedding_in_pipeline_split ||
         p.account_for_loss_in_pipeline_split;
}

bool mtp_standalone(const Scenario& s) {
  if (mtp_depths(s.model) <= 0) return false;
  const auto plans = pipeline_partition(s);
  return std::any_of(plans.begin(), plans.end(),
                     [](const ChunkPlan& p) { return p.mtp_layers > 0 && !p.post_process; });
}

std::vector<int> embedding_stages(const Scenario& s) {
  if (!mtp_standalone(s)) return {};
  const int pp = s.parallelism.pipeline_model_parallel_size;
  const auto plans = pipeline_partition(s);
  std::vector<int> stages{0};
  for (std::size_t v = 0; v < plans.size(); ++v)
    if (plans[v].mtp_layers > 0)
      stages.push_back(static_cast<int>(v % static_cast<std::size_t>(pp)));
  if (!s.model.untie_embeddings_and_output_weights) stages.push_back(pp - 1);
  std::sort(stages.begin(), stages.end());
  stages.erase(std::unique(stages.begin(), stages.end()), stages.end());
  return stages;
}

bool middle_stages_alike(const Scenario& s) {
  const int pp = s.parallelism.pipeline_model_parallel_size;
  if (pp <= 3 || !s.parallelism.pipeline_model_parallel_layout) return true;
  const auto plans = pipeline_partition(s);
  for (std::size_t v = 0; v < plans.size(); ++v) {
    const auto r = static_cast<int>(v % static_cast<std::size_t>(pp));
    if (r <= 1 || r == pp - 1) continue;
    const ChunkPlan& a = plans[v];
    const ChunkPlan& b = plans[v - static_cast<std::size_t>(r - 1)];  // rank 1, same chunk
    if (a.num_layers != b.num_layers || a.pre_process != b.pre_process ||
        a.post_process != b.post_process || a.mtp_layers != b.mtp_layers)
      return false;
  }
  return true;
}

}  // namespace tandem
