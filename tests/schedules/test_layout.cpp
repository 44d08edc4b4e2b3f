// Tests of the process-group layout (schedules/layout.hpp). The golden table checks every
// group of every kind, for many shapes and orders, against a brute-force reference written
// here: each rank's coordinates by mixed-radix decomposition, a group = the ranks that agree
// on every coordinate outside the kind. The worked examples are written out by hand, and
// the expert-grid tables were produced by Megatron-Core's own RankGenerator.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "core/error.hpp"
#include "schedules/layout.hpp"

namespace tandem {
namespace {

using Groups = std::vector<std::vector<int>>;

// ---- brute-force reference -------------------------------------------------------------

struct Shape {
  int world, tp, pp, cp, ep;
};

// One grid of the reference: token names in order (fastest first) and their sizes.
struct RefGrid {
  std::vector<std::string> tokens;
  std::map<std::string, int> size;
};

RefGrid ref_grid(const Shape& s, const std::string& order, bool expert) {
  const int dp = s.world / (s.tp * s.pp * s.cp);
  RefGrid g;
  g.size = expert ? std::map<std::string, int>{{"tp", s.tp},
                                               {"cp", 1},
                                               {"ep", s.ep},
                                               {"dp", dp * s.cp / s.ep},
                                               {"pp", s.pp}}
                  : std::map<std::string, int>{
                        {"tp", s.tp}, {"cp", s.cp}, {"ep", 1}, {"dp", dp}, {"pp", s.pp}};
  std::stringstream in(order);
  for (std::string t; std::getline(in, t, '-');) g.tokens.push_back(t);
  for (const char* t : {"tp", "pp", "dp", "ep", "cp"})
    if (std::find(g.tokens.begin(), g.tokens.end(), t) == g.tokens.end()) g.tokens.push_back(t);
  return g;
}

std::map<std::string, int> ref_coords(const RefGrid& g, int rank) {
  std::map<std::string, int> c;
  for (const auto& t : g.tokens) {
    c[t] = rank % g.size.at(t);
    rank /= g.size.at(t);
  }
  return c;
}

// Mixed-radix number of the coordinates whose membership in `kind` equals `inside`.
long ref_key(const RefGrid& g, const std::map<std::string, int>& c,
             const std::set<std::string>& kind, bool inside) {
  long key = 0, radix = 1;
  for (const auto& t : g.tokens) {
    if (kind.count(t) != static_cast<std::size_t>(inside)) continue;
    key += c.at(t) * radix;
    radix *= g.size.at(t);
  }
  return key;
}

Groups ref_groups(const RefGrid& g, int world, const std::set<std::string>& kind) {
  std::map<long, std::map<long, int>> buckets;  // outside key → (inside key → rank)
  for (int r = 0; r < world; ++r) {
    const auto c = ref_coords(g, r);
    buckets[ref_key(g, c, kind, false)][ref_key(g, c, kind, true)] = r;
  }
  Groups out;
  for (const auto& [outside, members] : buckets) {
    out.emplace_back();
    for (const auto& [inside, rank] : members) out.back().push_back(rank);
  }
  return out;
}

std::map<GroupKind, Groups> reference_layout(const Shape& s, const std::string& order) {
  const RefGrid dense = ref_grid(s, order, false);
  const RefGrid expert = ref_grid(s, order, true);
  std::map<GroupKind, Groups> g;
  g[GroupKind::tp] = ref_groups(dense, s.world, {"tp"});
  g[GroupKind::pp] = ref_groups(dense, s.world, {"pp"});
  g[GroupKind::dp] = ref_groups(dense, s.world, {"dp"});
  g[GroupKind::cp] = ref_groups(dense, s.world, {"cp"});
  g[GroupKind::dp_cp] = ref_groups(dense, s.world, {"dp", "cp"});
  g[GroupKind::tp_cp] = ref_groups(dense, s.world, {"tp", "cp"});
  g[GroupKind::tp_pp] = ref_groups(dense, s.world, {"tp", "pp"});
  g[GroupKind::tp_dp_cp] = ref_groups(dense, s.world, {"tp", "dp", "cp"});
  g[GroupKind::tp_dp] = ref_groups(dense, s.world, {"tp", "dp"});
  g[GroupKind::ep] = ref_groups(expert, s.world, {"ep"});
  g[GroupKind::tp_ep] = ref_groups(expert, s.world, {"tp", "ep"});
  g[GroupKind::expert_dp] = ref_groups(expert, s.world, {"dp"});
  for (const auto& pp : g[GroupKind::pp]) {
    g[GroupKind::embedding].push_back(pp.size() == 1 ? std::vector<int>{pp.front()}
                                                     : std::vector<int>{pp.front(), pp.back()});
    g[GroupKind::position_embedding].push_back({pp.front()});
  }
  return g;
}

// Megatron-Core accepts a layout only when pp is the slowest dimension or the expert grid's
// dp equals the dense dp, and when both grids agree on the pipeline groups.
bool reference_accepts(const Shape& s, const std::string& order) {
  const int dp = s.world / (s.tp * s.pp * s.cp);
  const bool pp_last = order.size() >= 2 && order.substr(order.size() - 2) == "pp";
  if (!pp_last && s.pp > 1 && dp * s.cp / s.ep != dp) return false;
  return ref_groups(ref_grid(s, order, false), s.world, {"pp"}) ==
         ref_groups(ref_grid(s, order, true), s.world, {"pp"});
}

const std::vector<Shape> kShapes = {
    {1, 1, 1, 1, 1},  {2, 2, 1, 1, 1},  {2, 1, 2, 1, 1},  {2, 1, 1, 2, 1},  {2, 1, 1, 1, 2},
    {4, 2, 2, 1, 1},  {4, 1, 1, 1, 4},  {4, 1, 2, 2, 2},  {6, 1, 3, 1, 1},  {6, 3, 1, 1, 2},
    {8, 2, 2, 1, 1},  {8, 2, 2, 1, 2},  {8, 1, 2, 2, 2},  {8, 2, 1, 2, 1},  {8, 2, 1, 2, 4},
    {8, 1, 1, 1, 8},  {8, 8, 1, 1, 1},  {8, 1, 8, 1, 1},  {12, 2, 3, 1, 2}, {12, 3, 2, 2, 1},
    {12, 1, 2, 3, 3}, {16, 2, 2, 2, 2}, {16, 4, 2, 1, 2}, {16, 2, 4, 1, 1}, {16, 1, 1, 4, 2},
    {16, 1, 2, 2, 4}, {18, 3, 3, 1, 1}, {24, 2, 3, 2, 4}, {24, 2, 2, 3, 3}, {27, 3, 3, 3, 3},
    {30, 5, 3, 1, 2}, {32, 4, 2, 2, 4}, {32, 2, 2, 2, 8}, {36, 3, 2, 3, 3}, {48, 4, 3, 2, 2},
    {64, 8, 2, 2, 4}, {64, 2, 4, 4, 2},
};

const std::vector<std::string> kOrders = {"tp-cp-ep-dp-pp", "tp-cp-ep-pp-dp", "dp-tp-cp-ep-pp"};

std::string describe(const Shape& s, const std::string& order) {
  return "world " + std::to_string(s.world) + " tp " + std::to_string(s.tp) + " pp " +
         std::to_string(s.pp) + " cp " + std::to_string(s.cp) + " ep " + std::to_string(s.ep) +
         " order " + order;
}

Layout layout_of(const Shape& s, const std::string& order) {
  return make_layout(
      {.world_size = s.world, .tp = s.tp, .pp = s.pp, .cp = s.cp, .ep = s.ep, .order = order});
}

// ---- golden table against the reference ------------------------------------------------

TEST(LayoutGolden, EveryGroupOfEveryKindMatchesBruteForce) {
  int compared = 0;
  for (const auto& s : kShapes) {
    for (const auto& order : kOrders) {
      SCOPED_TRACE(describe(s, order));
      if (!reference_accepts(s, order)) {
        EXPECT_THROW(layout_of(s, order), ConfigError);
        continue;
      }
      const Layout layout = layout_of(s, order);
      const auto expected = reference_layout(s, order);
      for (GroupKind k : kAllGroupKinds) {
        SCOPED_TRACE(std::string(group_kind_name(k)));
        EXPECT_EQ(layout.of(k), expected.at(k));
      }
      ++compared;
    }
  }
  EXPECT_GE(compared, 60);
}

TEST(LayoutGolden, ContextMatchesBruteForceCoordinates) {
  for (const auto& s : kShapes) {
    for (const auto& order : kOrders) {
      if (!reference_accepts(s, order)) continue;
      SCOPED_TRACE(describe(s, order));
      const Layout layout = layout_of(s, order);
      const RefGrid dense = ref_grid(s, order, false);
      const RefGrid expert = ref_grid(s, order, true);
      for (int r = 0; r < s.world; ++r) {
        const auto c = ref_coords(dense, r);
        const auto ctx = make_parallel_context(layout, r);
        EXPECT_EQ(ctx.coords.tp, c.at("tp"));
        EXPECT_EQ(ctx.coords.cp, c.at("cp"));
        EXPECT_EQ(ctx.coords.dp, c.at("dp"));
        EXPECT_EQ(ctx.coords.pp, c.at("pp"));
        EXPECT_EQ(ctx.coords.ep, ref_coords(expert, r).at("ep"));
      }
    }
  }
}

// ---- worked examples --------------------------------------------------------------------

TEST(LayoutExample, Tp2Pp2Dp2DefaultOrder) {
  const Layout l = make_layout({.world_size = 8, .tp = 2, .pp = 2});
  EXPECT_EQ(l.sizes.dp, 2);
  EXPECT_EQ(l.order, "tp-cp-ep-dp-pp");
  EXPECT_EQ(l.of(GroupKind::tp), (Groups{{0, 1}, {2, 3}, {4, 5}, {6, 7}}));
  EXPECT_EQ(l.of(GroupKind::dp), (Groups{{0, 2}, {1, 3}, {4, 6}, {5, 7}}));
  EXPECT_EQ(l.of(GroupKind::pp), (Groups{{0, 4}, {1, 5}, {2, 6}, {3, 7}}));
  EXPECT_EQ(l.of(GroupKind::tp_pp), (Groups{{0, 1, 4, 5}, {2, 3, 6, 7}}));
  EXPECT_EQ(l.of(GroupKind::embedding), (Groups{{0, 4}, {1, 5}, {2, 6}, {3, 7}}));
  EXPECT_EQ(l.of(GroupKind::position_embedding), (Groups{{0}, {1}, {2}, {3}}));
  EXPECT_EQ(l.of(GroupKind::tp_dp), (Groups{{0, 1, 2, 3}, {4, 5, 6, 7}}));
  EXPECT_EQ(l.of(GroupKind::cp), (Groups{{0}, {1}, {2}, {3}, {4}, {5}, {6}, {7}}));
}

TEST(LayoutExample, Tp2Pp2Dp2PipelineBeforeData) {
  // rank = tp + 2·pp + 4·dp.
  const Layout l = make_layout({.world_size = 8, .tp = 2, .pp = 2, .order = "tp-cp-ep-pp-dp"});
  EXPECT_EQ(l.of(GroupKind::tp), (Groups{{0, 1}, {2, 3}, {4, 5}, {6, 7}}));
  EXPECT_EQ(l.of(GroupKind::pp), (Groups{{0, 2}, {1, 3}, {4, 6}, {5, 7}}));
  EXPECT_EQ(l.of(GroupKind::dp), (Groups{{0, 4}, {1, 5}, {2, 6}, {3, 7}}));
  EXPECT_EQ(l.of(GroupKind::tp_pp), (Groups{{0, 1, 2, 3}, {4, 5, 6, 7}}));
  EXPECT_EQ(l.of(GroupKind::tp_dp), (Groups{{0, 1, 4, 5}, {2, 3, 6, 7}}));
  EXPECT_EQ(l.of(GroupKind::embedding), (Groups{{0, 2}, {1, 3}, {4, 6}, {5, 7}}));
  EXPECT_EQ(l.of(GroupKind::position_embedding), (Groups{{0}, {1}, {4}, {5}}));
}

// Printed by Megatron-Core's RankGenerator (initialize_model_parallel's two generators).
TEST(LayoutExample, ExpertGridTp2Dp4Ep2) {
  const Layout l = make_layout({.world_size = 8, .tp = 2, .ep = 2});
  EXPECT_EQ(l.of(GroupKind::ep), (Groups{{0, 2}, {1, 3}, {4, 6}, {5, 7}}));
  EXPECT_EQ(l.of(GroupKind::tp_ep), (Groups{{0, 1, 2, 3}, {4, 5, 6, 7}}));
  EXPECT_EQ(l.of(GroupKind::expert_dp), (Groups{{0, 4}, {1, 5}, {2, 6}, {3, 7}}));
  EXPECT_EQ(l.of(GroupKind::dp), (Groups{{0, 2, 4, 6}, {1, 3, 5, 7}}));
}

TEST(LayoutExample, ExpertGridFoldsContextParallelIntoExpertData) {
  // tp 1, pp 2, cp 2, dp 2, ep 2: ep spans the cp ranks, so ep need only divide dp · cp.
  const Layout l = make_layout({.world_size = 8, .pp = 2, .cp = 2, .ep = 2});
  EXPECT_EQ(l.of(GroupKind::cp), (Groups{{0, 1}, {2, 3}, {4, 5}, {6, 7}}));
  EXPECT_EQ(l.of(GroupKind::dp), (Groups{{0, 2}, {1, 3}, {4, 6}, {5, 7}}));
  EXPECT_EQ(l.of(GroupKind::dp_cp), (Groups{{0, 1, 2, 3}, {4, 5, 6, 7}}));
  EXPECT_EQ(l.of(GroupKind::ep), (Groups{{0, 1}, {2, 3}, {4, 5}, {6, 7}}));
  EXPECT_EQ(l.of(GroupKind::expert_dp), (Groups{{0, 2}, {1, 3}, {4, 6}, {5, 7}}));
  const Layout small = make_layout({.world_size = 4, .cp = 2, .ep = 2});  // dp 2, expert dp 2
  EXPECT_EQ(small.of(GroupKind::ep), (Groups{{0, 1}, {2, 3}}));
  const Layout no_dp = make_layout({.world_size = 4, .cp = 4, .ep = 2});  // dp = 1
  EXPECT_EQ(no_dp.of(GroupKind::ep), (Groups{{0, 1}, {2, 3}}));
  EXPECT_EQ(no_dp.of(GroupKind::expert_dp), (Groups{{0, 2}, {1, 3}}));
}

TEST(LayoutExample, OrderIsCaseInsensitiveAndMissingUnitTokensAreAppended) {
  const Layout def = make_layout({.world_size = 8, .tp = 2, .pp = 2});
  const Layout upper = make_layout({.world_size = 8, .tp = 2, .pp = 2, .order = "TP-Cp-EP-DP-pp"});
  const Layout short_order = make_layout({.world_size = 8, .tp = 2, .pp = 2, .order = "tp-dp-pp"});
  EXPECT_EQ(upper.order, "tp-cp-ep-dp-pp");
  EXPECT_EQ(upper.groups, def.groups);
  EXPECT_EQ(short_order.groups, def.groups);
}

TEST(LayoutExample, MaskedOrthogonalRankGroupsDocstringExample) {
  // Megatron's docstring: sizes [tp 2, dp 3, pp 4], dp masked.
  const Groups g = masked_orthogonal_rank_groups(24, {2, 3, 4}, {false, true, false});
  ASSERT_EQ(g.size(), 8U);
  EXPECT_EQ(g[0], (std::vector<int>{0, 2, 4}));
  EXPECT_EQ(g[1], (std::vector<int>{1, 3, 5}));
  EXPECT_EQ(g[7], (std::vector<int>{19, 21, 23}));
}

// ---- properties -------------------------------------------------------------------------

int kind_size(const ParallelSizes& s, GroupKind k) {
  const int expert_dp = s.dp * s.cp / s.ep;
  switch (k) {
    case GroupKind::tp:
      return s.tp;
    case GroupKind::pp:
      return s.pp;
    case GroupKind::dp:
      return s.dp;
    case GroupKind::cp:
      return s.cp;
    case GroupKind::ep:
      return s.ep;
    case GroupKind::dp_cp:
      return s.dp * s.cp;
    case GroupKind::tp_cp:
      return s.tp * s.cp;
    case GroupKind::tp_pp:
      return s.tp * s.pp;
    case GroupKind::tp_dp_cp:
      return s.tp * s.dp * s.cp;
    case GroupKind::tp_dp:
      return s.tp * s.dp;
    case GroupKind::tp_ep:
      return s.tp * s.ep;
    case GroupKind::expert_dp:
      return expert_dp;
    case GroupKind::embedding:
      return std::min(s.pp, 2);
    case GroupKind::position_embedding:
      return 1;
  }
  return -1;
}

bool is_stage_group(GroupKind k) {
  return k == GroupKind::embedding || k == GroupKind::position_embedding;
}

TEST(LayoutProperties, KindsPartitionTheWorldWithProductSizedGroups) {
  for (const auto& s : kShapes) {
    SCOPED_TRACE(describe(s, "tp-cp-ep-dp-pp"));
    const Layout l = layout_of(s, "tp-cp-ep-dp-pp");
    for (GroupKind k : kAllGroupKinds) {
      SCOPED_TRACE(std::string(group_kind_name(k)));
      std::vector<int> seen;
      for (const auto& g : l.of(k)) {
        EXPECT_EQ(static_cast<int>(g.size()), kind_size(l.sizes, k));
        seen.insert(seen.end(), g.begin(), g.end());
      }
      std::sort(seen.begin(), seen.end());
      EXPECT_TRUE(std::adjacent_find(seen.begin(), seen.end()) == seen.end()) << "overlap";
      // Embedding groups cover only the first and last stages; the others cover everyone.
      const int covered = is_stage_group(k)
                              ? static_cast<int>(l.of(GroupKind::pp).size()) * kind_size(l.sizes, k)
                              : s.world;
      EXPECT_EQ(static_cast<int>(seen.size()), covered);
    }
  }
}

TEST(LayoutProperties, ContextAgreesWithGroups) {
  for (const auto& s : kShapes) {
    for (const auto& order : {"tp-cp-ep-dp-pp", "tp-cp-ep-pp-dp"}) {
      if (!reference_accepts(s, order)) continue;
      SCOPED_TRACE(describe(s, order));
      const Layout l = layout_of(s, order);
      for (int r = 0; r < s.world; ++r) {
        const ParallelContext ctx = make_parallel_context(l, r);
        EXPECT_EQ(ctx.rank, r);
        EXPECT_EQ(ctx.sizes.world(), s.world);
        for (GroupKind k : kAllGroupKinds) {
          std::vector<int> expected;
          for (const auto& g : l.of(k))
            if (std::find(g.begin(), g.end(), r) != g.end()) expected = g;
          EXPECT_EQ(ctx.group(k), expected) << group_kind_name(k) << " rank " << r;
        }
        EXPECT_EQ(ctx.is_pipeline_first_stage(), ctx.in_group(GroupKind::position_embedding));
      }
    }
  }
}

TEST(LayoutProperties, MiddleStageIsInNoEmbeddingGroup) {
  const Layout l = make_layout({.world_size = 4, .pp = 4});
  EXPECT_EQ(make_parallel_context(l, 0).group(GroupKind::embedding), (std::vector<int>{0, 3}));
  EXPECT_FALSE(make_parallel_context(l, 1).in_group(GroupKind::embedding));
  EXPECT_FALSE(make_parallel_context(l, 2).in_group(GroupKind::position_embedding));
  EXPECT_TRUE(make_parallel_context(l, 3).is_pipeline_last_stage());
}

// pretrain_gpt.py's get_embedding_ranks with a multi-token prediction stage of its own:
// the first stage, the MTP stage and (tied) the last. TP 2 × PP 4 on 8 ranks, rank = tp +
// 2·pp: the stages 0, 2 and 3 of each pp group [0, 2, 4, 6] and [1, 3, 5, 7].
TEST(LayoutExample, EmbeddingGroupWithAnMtpStage) {
  const Layout l = make_layout({.world_size = 8, .tp = 2, .pp = 4, .embedding_stages = {0, 2, 3}});
  EXPECT_EQ(l.of(GroupKind::embedding), (Groups{{0, 4, 6}, {1, 5, 7}}));
  EXPECT_EQ(make_parallel_context(l, 5).group(GroupKind::embedding), (std::vector<int>{1, 5, 7}));
  EXPECT_FALSE(make_parallel_context(l, 2).in_group(GroupKind::embedding));
}

// ---- validation -------------------------------------------------------------------------

// The violations of the ConfigError that make_layout(spec) throws.
std::vector<Violation> violations_of(const LayoutSpec& spec) {
  try {
    make_layout(spec);
  } catch (const ConfigError& e) {
    return e.violations();
  }
  ADD_FAILURE() << "no ConfigError";
  return {};
}

void expect_single(const LayoutSpec& spec, const std::string& field, const std::string& value,
                   const std::string& rule_part) {
  const auto v = violations_of(spec);
  ASSERT_EQ(v.size(), 1U);
  EXPECT_EQ(v[0].field, field);
  EXPECT_EQ(v[0].value, value);
  EXPECT_NE(v[0].rule.find(rule_part), std::string::npos) << v[0].rule;
}

TEST(LayoutValidation, EmbeddingStagesInsideThePipeline) {
  expect_single({.world_size = 4, .pp = 4, .embedding_stages = {0, 4}}, "embedding_stages", "4",
                "increasing pipeline ranks in [0, pipeline_model_parallel_size = 4)");
  expect_single({.world_size = 4, .pp = 4, .embedding_stages = {2, 1}}, "embedding_stages", "1",
                "increasing");
}

TEST(LayoutValidation, SizesBelowOne) {
  expect_single({.world_size = 0}, "world_size", "0", "at least 1");
  expect_single({.world_size = 8, .tp = 0}, "tensor_model_parallel_size", "0", "at least 1");
  expect_single({.world_size = 8, .pp = -2}, "pipeline_model_parallel_size", "-2", "at least 1");
  expect_single({.world_size = 8, .cp = 0}, "context_parallel_size", "0", "at least 1");
  expect_single({.world_size = 8, .ep = 0}, "expert_model_parallel_size", "0", "at least 1");
}

TEST(LayoutValidation, WorldNotDivisibleByModelParallelSizes) {
  // 12 ranks cannot hold tp 2 · pp 4 · cp 1 = 8; the message names every number.
  expect_single({.world_size = 12, .tp = 2, .pp = 4}, "world_size", "12",
                "tensor_model_parallel_size (2) x pipeline_model_parallel_size (4) x "
                "context_parallel_size (1) = 8");
  expect_single({.world_size = 4, .tp = 8}, "world_size", "4", "= 8");
}

TEST(LayoutValidation, ExpertParallelMustDivideDataTimesContext) {
  // dp = 4, cp = 1: ep 3 does not divide 4.
  expect_single({.world_size = 8, .tp = 2, .ep = 3}, "expert_model_parallel_size", "3",
                "data_parallel_size (4) x context_parallel_size (1) = 4");
  // dp = 2, cp = 2: ep 8 does not divide 4.
  expect_single({.world_size = 4, .cp = 2, .ep = 8}, "expert_model_parallel_size", "8", "= 4");
}

TEST(LayoutValidation, MalformedOrder) {
  expect_single({.world_size = 8, .order = "tp-xp-dp-pp"}, "order", "tp-xp-dp-pp", "'xp'");
  expect_single({.world_size = 8, .order = "tp--dp-pp"}, "order", "tp--dp-pp", "unknown token ''");
  expect_single({.world_size = 8, .order = "tp-dp-tp-pp"}, "order", "tp-dp-tp-pp",
                "'tp' appears more than once");
  expect_single({.world_size = 8, .pp = 2, .order = "tp-dp"}, "order", "tp-dp",
                "'pp' is missing but its size is 2");
  // dp = 1 but the expert grid's dp = cp / ep = 2 also needs a place in the order.
  expect_single({.world_size = 2, .cp = 2, .order = "tp-cp-ep-pp"}, "order", "tp-cp-ep-pp",
                "'dp' is missing but its size is 2");
}

TEST(LayoutValidation, PipelineNotLastNeedsEqualDenseAndExpertDp) {
  // Megatron-Core: "When not using pp-last rank ordering, the data parallel size of the
  // attention and moe layers must be the same" (dp 4, expert dp 4 / 2 = 2).
  expect_single({.world_size = 8, .pp = 2, .ep = 2, .order = "tp-cp-ep-pp-dp"}, "order",
                "tp-cp-ep-pp-dp", "must equal data_parallel_size (4)");
  // Same dp on both grids, but cp (dense) and ep (expert) sit on opposite sides of pp, so
  // the pipeline groups differ.
  expect_single({.world_size = 8, .pp = 2, .cp = 2, .ep = 2, .order = "tp-cp-pp-ep-dp"}, "order",
                "tp-cp-pp-ep-dp", "same pipeline groups");
  EXPECT_NO_THROW(
      make_layout({.world_size = 8, .pp = 2, .cp = 2, .ep = 2, .order = "tp-cp-ep-pp-dp"}));
}

TEST(LayoutValidation, ReportsEveryIndependentViolation) {
  const auto v = violations_of({.world_size = 12, .tp = 5, .order = "tp-xx"});
  ASSERT_EQ(v.size(), 2U);
  EXPECT_EQ(v[0].field, "order");
  EXPECT_EQ(v[1].field, "world_size");
}

TEST(LayoutValidation, RankOutsideTheWorld) {
  const Layout l = make_layout({.world_size = 8, .tp = 2, .pp = 2});
  EXPECT_THROW(make_parallel_context(l, -1), std::out_of_range);
  try {
    make_parallel_context(l, 8);
    ADD_FAILURE() << "no exception";
  } catch (const std::out_of_range& e) {
    EXPECT_NE(std::string(e.what()).find("rank 8"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace tandem

namespace tandem {
namespace {

TEST(GroupMembership, ColorIsTheGroupAndKeyThePositionInIt) {
  // World 8, tp 2, pp 2 (dp 2), order tp-cp-ep-dp-pp: tp groups {0,1} {2,3} {4,5} {6,7};
  // pp groups {0,4} {1,5} {2,6} {3,7}.
  const Layout l = make_layout({.world_size = 8, .tp = 2, .pp = 2});
  const GroupMembership tp = group_membership(l, GroupKind::tp, 5);
  EXPECT_EQ(tp.color, 2);
  EXPECT_EQ(tp.key, 1);
  const GroupMembership pp = group_membership(l, GroupKind::pp, 5);
  EXPECT_EQ(pp.color, 1);
  EXPECT_EQ(pp.key, 1);
  // A rank no group of the kind holds (an embedding group leaves middle stages out).
  Layout odd = l;
  odd.groups[GroupKind::embedding] = {{0, 4}};
  EXPECT_EQ(group_membership(odd, GroupKind::embedding, 2).color, -1);
  // A rank in two groups of one kind is a broken layout.
  odd.groups[GroupKind::tp] = {{0, 1}, {1, 2}};
  EXPECT_THROW(group_membership(odd, GroupKind::tp, 1), std::logic_error);
}

}  // namespace
}  // namespace tandem
