// Megatron's --fp8-param-gather (Transformer Engine's FP8 parameters): the weights of the FP8
// linear layers are held as FP8 codes, not 16-bit values (ParameterSpec::fp8). After every
// optimizer step each data-parallel rank casts the fp32 main values of its slices into the
// codes (TE's cast_master_weights_to_fp8) and the codes, one byte an element, are what the
// distributed optimizer all-gathers; forward reads them as they are, so a step quantizes no
// weight and keeps no 16-bit copy of one.
//
//   recipe       scale of the cast
//   delayed      the weight's scale in its layer's state (Fp8LayerState), the shard's amax
//                recorded for the next update (reduced over tp and dp with the others', at
//                the layer's next step)
//   tensorwise   fp8_max / amax of the whole weight: each rank's amax of its slices, an
//                all-reduce (max) of every weight's at once over dp, then the cast
//
// The blockwise and MXFP8 recipes (block scales cut by the shard boundaries) are not built.
#pragma once

#include <vector>

#include "core/communicator.hpp"
#include "model/fp8_linear.hpp"
#include "model/optimizer_shard.hpp"
#include "model/parameters.hpp"

namespace tandem {

// An FP8 parameter and the layer state whose scales it uses.
struct Fp8Weight {
  int param = -1;                  // index in the ParameterSet (its spec.fp8 set)
  Fp8LayerState* state = nullptr;  // its layer's
  int linear = 0;                  // 0 qkv, 1 proj, 2 fc1, 3 fc2
};

class Fp8ParamCast {
 public:
  // `weights`: every FP8 parameter of `params` (params.fp8_params()), in any order, all of
  // one recipe (delayed or tensorwise).
  Fp8ParamCast(ParameterSet& params, const std::vector<Fp8Weight>& weights);

  // This rank's main values (the pieces of `shard`) of every FP8 parameter cast into its
  // codes, and every FP8 parameter's scale_inv set, held or not; `dp` the group the
  // tensorwise amaxes are reduced over. Collective over dp under tensorwise scaling.
  void cast(Device& d, Stream& s, const OptimizerShard& shard, Communicator& dp);

 private:
  ParameterSet& params_;
  std::vector<Fp8Weight> weights_;  // in params.fp8_params() order
  std::vector<int> slot_of_;        // parameter index → its place in weights_ (−1: none)
  bool delayed_ = false;
  Tensor amax_, scale_;  // tensorwise: (n) fp32
};

}  // namespace tandem
