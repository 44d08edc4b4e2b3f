// The mixture-of-experts MLP of Megatron-Core's MoELayer, in place of a layer's MLP: a
// TopKRouter (softmax scores, top-k, aux_loss load balancing), the alltoall token
// dispatcher (dropless) and the experts, each an MLP of its own, plus an optional shared
// expert every token goes through (Megatron's SharedExpertMLP, an ordinary tensor-parallel
// MLP). Activations in and out are this rank's tokens: its sequence shard under sequence
// parallelism (Megatron requires it with tp > 1), (T·B / tp, C).
//
// Expert e lives on ep rank e / (E / ep) and, as Megatron's default expert tensor
// parallelism equals tp, each expert's MLP is split over the tp group like a dense one
// (fc1 rows, fc2 columns). Forward, on every rank:
//   router     logits = x · Wrᵀ; probs, top, gates; the copies per expert go to the host
//   counts     all-gathered over tp, then ep: every rank knows who sends whom what
//   permute    the N·k copies of the tokens, grouped by expert = by destination ep rank
//   all-to-all over ep (variable splits): each rank gets the copies for its experts
//   tp gather  (tp > 1) the tp ranks' copies, so each holds all of them for its experts
//   sort       chunks (tp rank, ep rank, expert) → (expert, tp rank, ep rank)
//   experts    per local expert: fc1, activation, fc2 (partial sums over tp)
//   and back: unsort, tp reduce-scatter (tp > 1), all-to-all over ep, unpermute with the
//   gates (Megatron applies them inside the experts; the second GEMM being linear, the
//   values agree up to rounding).
// With Megatron's allgather dispatcher instead, every rank all-gathers the tokens, experts
// and gates of its tp-ep group, runs its experts on their copies and reduce-scatters the
// combined outputs back (which also sums the experts' tp partial sums).
// The aux loss's gradient, coeff · E / (k · T²) · f_e into every probs(t, e) with f the
// copies per expert over the tp (and cp) group's whole sequence and T its tokens, enters
// the router's backward scaled like the LM loss (Megatron's MoEAuxLossAutoScaler), so
// the shards of a sequence together get the gradient of the whole sequence's loss.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "model/tensor_parallel.hpp"

namespace tandem {

struct MoeOptions {
  int num_experts = 0;  // 0: a dense MLP
  int top_k = 2;
  int ffn = 0;         // an expert's MLP width
  int shared_ffn = 0;  // the shared expert's width (0: none)
  float aux_loss_coeff = 0;
  bool pre_softmax = false;
  bool force_balance = false;  // Megatron's moe_router_force_load_balancing
  // Megatron's allgather token dispatcher instead of alltoall (see MoeLayer).
  bool allgather_dispatcher = false;
  // The router (core/device.hpp MoeRouterArgs): score function, group-limited routing
  // (0: off), the gates' scaling factor, and the aux-loss-free expert bias (sigmoid only),
  // which the trainer updates once per optimizer step (update_expert_bias).
  MoeScoreFunction score_function = MoeScoreFunction::softmax;
  int num_groups = 0;
  int group_topk = 0;
  float topk_scaling_factor = 1.0f;
  bool expert_bias = false;
  // Token dropping (MoeDropTokensArgs): each expert takes at most
  // ceil(T·k / E · capacity_factor) of a rank's T tokens (0: dropless).
  double capacity_factor = 0;
  MoeDropPolicy drop_policy = MoeDropPolicy::probs;
  bool pad_to_capacity = false;
};

// The split sizes of one dispatch, from every (ep, tp) member's copies per expert.
struct MoeSplits {
  int ep = 1, tp = 1, ep_rank = 0, tp_rank = 0, experts = 0;
  std::vector<std::int64_t> counts;  // [ep][tp][E]: member (ep j, tp i)'s copies for expert e
  std::int64_t count(int j, int i, int e) const {
    return counts[(static_cast<std::size_t>(j) * tp + i) * experts + e];
  }
  int local_experts() const { return experts / ep; }
  int first_local() const { return ep_rank * local_experts(); }
  // Rows this rank sends to ep rank j (its copies for j's experts).
  std::int64_t send_rows(int j) const;
  // Rows tp rank i of this ep column receives from ep rank j (their copies for our experts).
  std::int64_t recv_rows(int i, int j) const;
  // Rows tp rank i holds after the ep exchange.
  std::int64_t held_rows(int i) const;
  // Rows local expert e (0-based among this rank's) gets, over the tp and ep members.
  std::int64_t expert_rows(int e) const;
};

struct MoeActivations {
  Tensor input;  // (N, C): what the router and the experts read (the layer norm's output)
  Tensor probs, top, gates, row_of_copy, source_of_row;
  // What the dispatcher moves: top and gates, or with token dropping the (N, W) dispatch
  // tables (dropped slots −1, padding's fillers after the k routed slots).
  Tensor route_top, route_gates;
  Tensor dispatched;     // (rows, C) the local experts' input, expert-major
  Tensor fc1_out, act;   // (rows, F1 / tp), (rows, F / tp)
  Tensor expert_output;  // (N·k, C) back on this rank, in permuted order (allgather: all
                         // members' copies, zero outside this rank's experts)
  Tensor permuted, gathered_gates;  // allgather: every member's copies and gates
  Tensor shared_fc1_out, shared_act;
  MoeSplits splits;
  std::vector<std::int64_t> sequence_counts;  // (E) copies per expert over tp and cp
  std::int64_t sequence_tokens = 0;
};

// sum[e] += more[e], sum grown to more's length: tokens per expert added up over layers
// and chunks.
void add_counts(std::vector<std::int64_t>& sum, const std::vector<std::int64_t>& more);

class MoeLayer {
 public:
  // Registers the router, this rank's experts and the shared expert under `prefix`
  // ("layers.3.mlp."): experts by their global index, so every ep size starts from the
  // same model. ep_size / ep_rank place this rank on the expert grid.
  MoeLayer(ParameterSet& params, const std::string& prefix, int hidden, const MoeOptions& options,
           bool swiglu, bool sequence_parallel, int ep_size, int ep_rank, float init_std,
           float out_std);

  Tensor forward(ModelEnv& env, const Tensor& x, MoeActivations& a);
  // dx for the input x; `loss_scale` is the LM loss's (the aux loss is scaled alike).
  Tensor backward(ModelEnv& env, const Tensor& grad_out, MoeActivations& a, float loss_scale);
  std::vector<int> parameter_indices() const;
  // Copies this rank's tokens sent to each expert, summed over the microbatches trained
  // (counted once per backward, so recomputation and evaluation do not add).
  const std::vector<std::int64_t>& routed() const { return routed_; }
  // The aux-loss-free expert bias (E; empty without one) and the copies this rank sent to
  // each expert since the last take (Megatron's local_tokens_per_expert: after dropping,
  // counted once per backward).
  std::vector<float>& expert_bias() { return expert_bias_; }
  std::vector<std::int64_t> take_step_counts();

 private:
  Communicator& ep(ModelEnv& env) const;
  Communicator& tp_ep(ModelEnv& env) const;
  // Rows per local expert, and (allgather) where this rank's experts' block starts in the
  // permutation of every member's copies and how many rows it has.
  std::vector<std::int64_t> local_expert_rows(const MoeSplits& s) const;
  std::pair<std::int64_t, std::int64_t> local_block(const MoeSplits& s) const;
  // The local experts on `in` (expert-major rows): fc1, activation, fc2 into y; backward.
  void experts_forward(ModelEnv& env, const Tensor& in, const std::vector<std::int64_t>& rows,
                       MoeActivations& a, Tensor& y);
  void experts_backward(ModelEnv& env, const Tensor& dy, const std::vector<std::int64_t>& rows,
                        MoeActivations& a, Tensor& d_in);
  // The two dispatchers: tokens to the experts and back, and backward (dx written, the
  // gates' gradient into d_gates).
  Tensor alltoall_forward(ModelEnv& env, const Tensor& x, MoeActivations& a);
  void alltoall_backward(ModelEnv& env, const Tensor& grad_out, MoeActivations& a, Tensor& dx,
                         Tensor& d_gates);
  Tensor allgather_forward(ModelEnv& env, const Tensor& x, MoeActivations& a);
  void allgather_backward(ModelEnv& env, const Tensor& grad_out, MoeActivations& a, Tensor& dx,
                          Tensor& d_gates);
  // The local experts' copies out of / back into this rank's permuted copies.
  Tensor dispatch(ModelEnv& env, const Tensor& permuted, const MoeSplits& s);
  Tensor combine(ModelEnv& env, const Tensor& expert_rows, const MoeSplits& s);
  void activation(ModelEnv& env, const Tensor& in, Tensor& out);
  void activation_backward(ModelEnv& env, const Tensor& grad, const Tensor& in, Tensor& grad_in);

  ParameterSet& params_;
  MoeOptions options_;
  bool swiglu_;
  int hidden_;
  int ep_size_, ep_rank_;
  int router_ = -1;
  std::vector<int> fc1_, fc2_;  // this rank's experts, in order
  int shared_fc1_ = -1, shared_fc2_ = -1;
  std::vector<std::int64_t> routed_;
  std::vector<float> expert_bias_;
  std::vector<std::int64_t> step_counts_;
};

// Megatron's get_updated_expert_bias: average = Σ_e counts / E, and each bias moves by
// rate toward balance: bias[e] += sign(average − counts[e]) · rate (fp32, as Megatron's
// tensors). counts are the copies per expert summed over the tp × dp × cp ranks.
void update_expert_bias(std::vector<float>& bias, const std::vector<float>& counts, float rate);

}  // namespace tandem
