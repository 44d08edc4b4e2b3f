// The process-group layout of Megatron-Core's initialize_model_parallel, as pure arithmetic:
// an order string and the parallel sizes give every rank a mixed-radix coordinate (first token
// fastest), and a group of kind "tp-dp" is the set of ranks that differ only in their tp and
// dp coordinates. Like Megatron-Core (since its "MoE parallel folding", 2024) two grids are
// laid over the same ranks: the dense grid (tp, cp, dp, pp) for attention and the embedding,
// and the expert grid (tp, ep, expert-dp, pp), where expert-dp = world / (tp · ep · pp) =
// dp · cp / ep, so cp folds into the expert data-parallel dimension. Validation happens before
// any group is computed and names the Megatron argument, the value and the rule.
#include "schedules/layout.hpp"

#include <algorithm>
#include <array>
#include <cctype>
#include <optional>
#include <stdexcept>
#include <string_view>

#include "core/error.hpp"

namespace tandem {
namespace {

enum class Dim { tp, cp, ep, dp, pp };

constexpr std::array kAllDims = {Dim::tp, Dim::cp, Dim::ep, Dim::dp, Dim::pp};

std::string_view dim_name(Dim d) {
  static constexpr std::array<std::string_view, kAllDims.size()> kNames = {"tp", "cp", "ep", "dp",
                                                                           "pp"};
  return kNames[static_cast<std::size_t>(d)];
}

// One generator of Megatron-Core: the order's dimensions (fastest first) and their sizes.
struct Grid {
  std::vector<Dim> dims;
  std::vector<int> sizes;
  std::vector<int> strides;  // stride of dims[i] = product of sizes[0..i)

  int world() const { return strides.back() * sizes.back(); }
  int coordinate(int rank, std::size_t i) const { return (rank / strides[i]) % sizes[i]; }
};

// Which grid a group kind lives on, and the dimensions it spans.
struct KindSpec {
  GroupKind kind;
  bool expert;  // taken from the expert grid (Megatron's expert_decoder_rank_generator)
  std::vector<Dim> dims;
};

// initialize_model_parallel's token for each kind. The expert kinds use the expert grid's
// tokens: expert tensor parallel = tp (Megatron's default expert_tensor_parallel_size), so
// "tp-ep" spans tp · ep ranks, and expert-dp is that grid's "dp" (size dp · cp / ep).
const std::vector<KindSpec>& kind_specs() {
  static const std::vector<KindSpec> kSpecs = {
      {GroupKind::tp, false, {Dim::tp}},
      {GroupKind::pp, false, {Dim::pp}},
      {GroupKind::dp, false, {Dim::dp}},
      {GroupKind::cp, false, {Dim::cp}},
      {GroupKind::dp_cp, false, {Dim::dp, Dim::cp}},
      {GroupKind::tp_cp, false, {Dim::tp, Dim::cp}},
      {GroupKind::tp_pp, false, {Dim::tp, Dim::pp}},
      {GroupKind::tp_dp_cp, false, {Dim::tp, Dim::dp, Dim::cp}},
      {GroupKind::tp_dp, false, {Dim::tp, Dim::dp}},
      {GroupKind::ep, true, {Dim::ep}},
      {GroupKind::tp_ep, true, {Dim::tp, Dim::ep}},
      {GroupKind::expert_dp, true, {Dim::dp}},
  };
  return kSpecs;
}

std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return s;
}

std::vector<std::string> split_tokens(const std::string& order) {
  std::vector<std::string> tokens;
  std::size_t start = 0;
  while (true) {
    const std::size_t dash = order.find('-', start);
    tokens.push_back(order.substr(start, dash - start));
    if (dash == std::string::npos) return tokens;
    start = dash + 1;
  }
}

std::optional<Dim> parse_dim(const std::string& token) {
  for (Dim d : kAllDims)
    if (dim_name(d) == token) return d;
  return std::nullopt;
}

// Size of each dimension on the dense grid (ep = 1) and on the expert grid (cp = 1).
std::array<int, kAllDims.size()> dim_sizes(const ParallelSizes& s, bool expert) {
  if (expert) return {s.tp, 1, s.ep, s.dp * s.cp / s.ep, s.pp};
  return {s.tp, s.cp, 1, s.dp, s.pp};
}

// The order's tokens as written (lower case). Megatron-Core's RankGenerator raises a KeyError
// on an unknown token and silently builds wrong groups from a duplicate; both are rejected.
std::vector<Dim> parse_tokens(const std::string& order, std::vector<Violation>& out) {
  std::vector<Dim> dims;
  for (const std::string& token : split_tokens(order)) {
    const auto d = parse_dim(token);
    if (!d)
      out.push_back({"order", order,
                     "unknown token '" + token + "'; tokens are tp, cp, ep, dp, pp joined by '-'"});
    else if (std::find(dims.begin(), dims.end(), *d) != dims.end())
      out.push_back({"order", order, "token '" + token + "' appears more than once"});
    else
      dims.push_back(*d);
  }
  return dims;
}

// Like RankGenerator, appends a dimension missing from the order when its size is 1 (on both
// grids) and refuses it otherwise.
void complete_order(std::vector<Dim>& dims, const std::string& order, const ParallelSizes& sizes,
                    std::vector<Violation>& out) {
  for (Dim d : kAllDims) {
    if (std::find(dims.begin(), dims.end(), d) != dims.end()) continue;
    const auto i = static_cast<std::size_t>(d);
    const int size = std::max(dim_sizes(sizes, false)[i], dim_sizes(sizes, true)[i]);
    if (size != 1)
      out.push_back({"order", order,
                     "token '" + std::string(dim_name(d)) + "' is missing but its size is " +
                         std::to_string(size) + " (only size-1 dimensions may be left out)"});
    dims.push_back(d);
  }
}

Grid make_grid(const std::vector<Dim>& dims, const ParallelSizes& s, bool expert) {
  Grid g{dims, {}, {}};
  int stride = 1;
  for (Dim d : dims) {
    g.sizes.push_back(dim_sizes(s, expert)[static_cast<std::size_t>(d)]);
    g.strides.push_back(stride);
    stride *= g.sizes.back();
  }
  return g;
}

std::vector<bool> mask_of(const Grid& g, const std::vector<Dim>& dims) {
  std::vector<bool> mask(g.dims.size(), false);
  for (std::size_t i = 0; i < g.dims.size(); ++i)
    mask[i] = std::find(dims.begin(), dims.end(), g.dims[i]) != dims.end();
  return mask;
}

void check_positive(std::vector<Violation>& out, const char* field, int value) {
  if (value < 1) out.push_back({field, std::to_string(value), "must be at least 1"});
}

std::string n(int v) {
  return std::to_string(v);
}

void check_sizes(const LayoutSpec& spec) {
  std::vector<Violation> out;
  check_positive(out, "world_size", spec.world_size);
  check_positive(out, "tensor_model_parallel_size", spec.tp);
  check_positive(out, "pipeline_model_parallel_size", spec.pp);
  check_positive(out, "context_parallel_size", spec.cp);
  check_positive(out, "expert_model_parallel_size", spec.ep);
  for (std::size_t i = 0; i < spec.embedding_stages.size(); ++i) {
    const int s = spec.embedding_stages[i];
    if (s < 0 || s >= spec.pp || (i > 0 && s <= spec.embedding_stages[i - 1]))
      out.push_back({"embedding_stages", n(s),
                     "must be increasing pipeline ranks in [0, pipeline_model_parallel_size = " +
                         n(spec.pp) + ")"});
  }
  if (!out.empty()) throw ConfigError(std::move(out));
}

// world must split into tp · pp · cp · dp, and (Megatron-Core's expert grid) into
// tp · ep · pp · expert-dp, which is the same as ep dividing dp · cp.
void check_divisibility(const LayoutSpec& spec, std::vector<Violation>& out) {
  const int model = spec.tp * spec.pp * spec.cp;
  if (spec.world_size % model != 0) {
    out.push_back({"world_size", n(spec.world_size),
                   "must be divisible by tensor_model_parallel_size (" + n(spec.tp) +
                       ") x pipeline_model_parallel_size (" + n(spec.pp) +
                       ") x context_parallel_size (" + n(spec.cp) + ") = " + n(model)});
    return;
  }
  const int dp = spec.world_size / model;
  if ((dp * spec.cp) % spec.ep != 0)
    out.push_back({"expert_model_parallel_size", n(spec.ep),
                   "must divide data_parallel_size (" + n(dp) + ") x context_parallel_size (" +
                       n(spec.cp) + ") = " + n(dp * spec.cp) + ", i.e. world_size (" +
                       n(spec.world_size) + ") must be divisible by tp (" + n(spec.tp) +
                       ") x ep (" + n(spec.ep) + ") x pp (" + n(spec.pp) + ")"});
}

// Megatron-Core's two asserts after building both generators: unless pp is the slowest
// dimension, the expert grid's dp must equal the dense dp; and both grids must produce the
// same pipeline groups (the pipeline schedule is shared by dense and expert layers).
void check_grids_agree(const std::string& order, const std::vector<Dim>& dims,
                       const ParallelSizes& s) {
  const int expert_dp = s.dp * s.cp / s.ep;
  if (dims.back() != Dim::pp && s.pp > 1 && expert_dp != s.dp)
    throw ConfigError("order", order,
                      "when pp is not the last token and pipeline_model_parallel_size (" + n(s.pp) +
                          ") > 1, the expert data-parallel size dp x cp / ep (" + n(expert_dp) +
                          ") must equal data_parallel_size (" + n(s.dp) + ")");
  const Grid dense = make_grid(dims, s, false);
  const Grid expert = make_grid(dims, s, true);
  const auto pp_groups = [&](const Grid& g) {
    return masked_orthogonal_rank_groups(g.world(), g.sizes, mask_of(g, {Dim::pp}));
  };
  if (pp_groups(dense) != pp_groups(expert))
    throw ConfigError("order", order,
                      "the dense grid (cp = " + n(s.cp) + ") and the expert grid (ep = " + n(s.ep) +
                          ") must give the same pipeline groups");
}

// Mixed-radix composition: the rank offset of `index` spread over the dimensions `sel`
// (fastest first) of grid g.
int compose(int index, const Grid& g, const std::vector<std::size_t>& sel) {
  int offset = 0;
  for (std::size_t i : sel) {
    offset += (index % g.sizes[i]) * g.strides[i];
    index /= g.sizes[i];
  }
  return offset;
}

std::vector<std::size_t> selected(const std::vector<bool>& mask, bool value) {
  std::vector<std::size_t> sel;
  for (std::size_t i = 0; i < mask.size(); ++i)
    if (mask[i] == value) sel.push_back(i);
  return sel;
}

int product(const Grid& g, const std::vector<std::size_t>& sel) {
  int p = 1;
  for (std::size_t i : sel) p *= g.sizes[i];
  return p;
}

// The group of the masked dimensions that contains `rank`, ordered by those dimensions.
std::vector<int> group_containing(const Grid& g, const std::vector<bool>& mask, int rank) {
  const auto masked = selected(mask, true);
  int base = rank;
  for (std::size_t i : masked) base -= g.coordinate(rank, i) * g.strides[i];
  std::vector<int> group;
  for (int k = 0, size = product(g, masked); k < size; ++k)
    group.push_back(base + compose(k, g, masked));
  return group;
}

// Megatron-Core's default_embedding_ranks / default_position_embedding_ranks; or the given
// stages of the pp group (pretrain_gpt.py's get_embedding_ranks with an MTP stage).
std::vector<int> embedding_ranks(const std::vector<int>& pp_group, const std::vector<int>& stages) {
  if (!stages.empty()) {
    std::vector<int> ranks;
    for (int s : stages) ranks.push_back(pp_group.at(static_cast<std::size_t>(s)));
    return ranks;
  }
  if (pp_group.size() == 1) return {pp_group.front()};
  return {pp_group.front(), pp_group.back()};
}

std::vector<int> position_embedding_ranks(const std::vector<int>& pp_group) {
  return {pp_group.front()};
}

// The two grids over the same ranks: dense (Megatron's decoder_rank_generator) and expert.
struct Grids {
  Grid dense;
  Grid expert;
};

// Rebuilt from a Layout, which stores only the sizes and the order that make_layout validated.
Grids make_grids(const std::string& order, const ParallelSizes& sizes) {
  std::vector<Violation> ignored;
  auto dims = parse_tokens(order, ignored);
  complete_order(dims, order, sizes, ignored);
  return {make_grid(dims, sizes, false), make_grid(dims, sizes, true)};
}

// The coordinate of `rank` along dimension d of grid g.
int coordinate_of(const Grid& g, Dim d, int rank) {
  const auto i = std::find(g.dims.begin(), g.dims.end(), d) - g.dims.begin();
  return g.coordinate(rank, static_cast<std::size_t>(i));
}

}  // namespace

std::vector<std::vector<int>> masked_orthogonal_rank_groups(int world_size,
                                                            const std::vector<int>& sizes,
                                                            const std::vector<bool>& mask) {
  if (sizes.size() != mask.size())
    throw std::invalid_argument("masked_orthogonal_rank_groups: sizes and mask differ in length");
  Grid g{{}, sizes, {}};
  int stride = 1;
  for (int s : sizes) {
    if (s < 1) throw std::invalid_argument("masked_orthogonal_rank_groups: size < 1");
    g.strides.push_back(stride);
    stride *= s;
  }
  if (stride != world_size)
    throw std::invalid_argument("masked_orthogonal_rank_groups: sizes multiply to " + n(stride) +
                                ", not the world size " + n(world_size));
  const auto masked = selected(mask, true);
  const auto unmasked = selected(mask, false);
  const int group_size = product(g, masked);
  std::vector<std::vector<int>> groups(static_cast<std::size_t>(world_size / group_size));
  for (std::size_t gi = 0; gi < groups.size(); ++gi) {
    const int base = compose(static_cast<int>(gi), g, unmasked);
    for (int k = 0; k < group_size; ++k) groups[gi].push_back(base + compose(k, g, masked));
  }
  return groups;
}

// Worked example, TP=2, PP=2, DP=2 on 8 ranks, order tp-cp-ep-dp-pp: rank = tp + 2·dp + 4·pp.
//   tp [0,1] [2,3] [4,5] [6,7]     dp [0,2] [1,3] [4,6] [5,7]     pp [0,4] [1,5] [2,6] [3,7]
//   tp-pp [0,1,4,5] [2,3,6,7]      embedding [0,4] [1,5] [2,6] [3,7]   position-embedding [0]…[3]
// With order tp-cp-ep-pp-dp instead, rank = tp + 2·pp + 4·dp:
//   tp [0,1] [2,3] [4,5] [6,7]     pp [0,2] [1,3] [4,6] [5,7]     dp [0,4] [1,5] [2,6] [3,7]
//   tp-pp [0,1,2,3] [4,5,6,7]      embedding [0,2] [1,3] [4,6] [5,7]
// Expert grid, TP=2, DP=4, EP=2 on 8 ranks (expert-dp = 4 / 2 = 2): rank = tp + 2·ep + 4·edp:
//   ep [0,2] [1,3] [4,6] [5,7]     tp-ep [0,1,2,3] [4,5,6,7]      expert-dp [0,4] [1,5] [2,6] [3,7]
Layout make_layout(const LayoutSpec& spec) {
  check_sizes(spec);
  Layout layout;
  layout.order = lower(spec.order);
  layout.embedding_stages = spec.embedding_stages;
  std::vector<Violation> out;
  auto dims = parse_tokens(layout.order, out);
  check_divisibility(spec, out);
  if (!out.empty()) throw ConfigError(std::move(out));
  const int dp = spec.world_size / (spec.tp * spec.pp * spec.cp);
  layout.sizes =
      ParallelSizes{.tp = spec.tp, .pp = spec.pp, .dp = dp, .cp = spec.cp, .ep = spec.ep, .vpp = 1};
  complete_order(dims, layout.order, layout.sizes, out);
  if (!out.empty()) throw ConfigError(std::move(out));
  check_grids_agree(layout.order, dims, layout.sizes);

  const Grids grids{make_grid(dims, layout.sizes, false), make_grid(dims, layout.sizes, true)};
  for (const KindSpec& k : kind_specs()) {
    const Grid& g = k.expert ? grids.expert : grids.dense;
    layout.groups[k.kind] = masked_orthogonal_rank_groups(g.world(), g.sizes, mask_of(g, k.dims));
  }
  auto& embedding = layout.groups[GroupKind::embedding];
  auto& position = layout.groups[GroupKind::position_embedding];
  for (const auto& pp_group : layout.groups.at(GroupKind::pp)) {
    embedding.push_back(embedding_ranks(pp_group, layout.embedding_stages));
    position.push_back(position_embedding_ranks(pp_group));
  }
  return layout;
}

ParallelContext make_parallel_context(const Layout& layout, int rank) {
  const int world = layout.sizes.world();
  if (rank < 0 || rank >= world)
    throw std::out_of_range("rank " + n(rank) + " is outside the world [0, " + n(world) + ")");
  const Grids grids = make_grids(layout.order, layout.sizes);
  ParallelContext ctx;
  ctx.rank = rank;
  ctx.sizes = layout.sizes;
  ctx.coords = RankCoordinates{.tp = coordinate_of(grids.dense, Dim::tp, rank),
                               .cp = coordinate_of(grids.dense, Dim::cp, rank),
                               .ep = coordinate_of(grids.expert, Dim::ep, rank),
                               .dp = coordinate_of(grids.dense, Dim::dp, rank),
                               .pp = coordinate_of(grids.dense, Dim::pp, rank)};
  for (const KindSpec& k : kind_specs()) {
    const Grid& g = k.expert ? grids.expert : grids.dense;
    ctx.groups[static_cast<std::size_t>(k.kind)] = group_containing(g, mask_of(g, k.dims), rank);
  }
  const auto& pp_group = ctx.group(GroupKind::pp);
  const auto in = [rank](const std::vector<int>& g) {
    return std::find(g.begin(), g.end(), rank) != g.end() ? g : std::vector<int>{};
  };
  ctx.groups[static_cast<std::size_t>(GroupKind::embedding)] =
      in(embedding_ranks(pp_group, layout.embedding_stages));
  ctx.groups[static_cast<std::size_t>(GroupKind::position_embedding)] =
      in(position_embedding_ranks(pp_group));
  return ctx;
}

GroupMembership group_membership(const Layout& layout, GroupKind kind, int rank) {
  const auto& groups = layout.of(kind);
  GroupMembership m;
  for (std::size_t g = 0; g < groups.size(); ++g) {
    const auto it = std::find(groups[g].begin(), groups[g].end(), rank);
    if (it == groups[g].end()) continue;
    if (m.color >= 0)
      throw std::logic_error("rank " + std::to_string(rank) + " is in two " +
                             std::string(group_kind_name(kind)) + " groups");
    m.color = static_cast<int>(g);
    m.key = static_cast<int>(it - groups[g].begin());
  }
  return m;
}

}  // namespace tandem
