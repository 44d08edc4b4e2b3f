// Which transformer layers, and whether the embedding and the loss, each model chunk of a
// pipeline holds: Megatron-Core's partition of a GPT over pipeline stages and virtual
// stages, as a pure function of the scenario. Megatron offers four ways to ask for it:
//  - even (the default): every chunk holds num_layers / (pp · vpp) layers;
//  - decoder_first/last_pipeline_num_layers: the first / last pp rank holds that many
//    layers, the remaining layers split evenly over the other ranks, and each rank's
//    layers split evenly over its vpp chunks;
//  - account_for_embedding/loss_in_pipeline_split: the embedding / the loss counts as one
//    layer in the even split, so the first / last chunk builds one layer fewer;
//  - pipeline_model_parallel_layout: a string naming every virtual stage's contents.
// Chunk c of pp rank r is virtual stage v = c·pp + r, and layers are numbered along v.
//
// Worked example (Llama 3 405B in Meta's layout): 126 layers, pp 16, vpp 2, both
// account_for flags. (126 + 2) / 16 = 8 layers a rank, 4 a chunk; v 0 holds the embedding
// and layers 0–2, v 1…30 hold 4 layers each (v holds 3 + 4(v − 1) …), v 31 holds layers
// 123–125 and the loss. pp rank 0 holds v 0 and v 16: 3 + 4 = 7 layers; rank 15 holds
// v 15 and v 31: 4 + 3 = 7; ranks 1–14 hold 8. The layout string "Ettt|(tttt|)*30tttL"
// says the same.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "core/scenario.hpp"

namespace tandem {

// What one model chunk holds: layers [first_layer, first_layer + num_layers) (possibly
// none), the word and position embeddings (pre_process) and the final norm, output layer
// and loss (post_process), as Megatron's GPTModel names the last two; and the multi-token
// prediction block's mtp_layers depths (Megatron's mtp_process: all of mtp_num_layers, on
// the last stage, or where a layout string's 'm' put them). With MTP the final norm sits on
// the chunk holding the last transformer layer (Megatron's has_final_layernorm_in_this_stage).
struct ChunkPlan {
  int first_layer = 0;
  int num_layers = 0;
  bool pre_process = false;
  bool post_process = false;
  int mtp_layers = 0;
  bool operator==(const ChunkPlan&) const = default;
};

// A pipeline_model_parallel_layout string read as Megatron's parser reads it: ',' is
// cosmetic, "(…)*n" repeats a group without parentheses inside it, "x*n" repeats one
// symbol, '|' ends a virtual stage. `stages` holds each virtual stage's symbols in the
// string's order (E embedding, t transformer layer, m MTP layer, L loss); `error` is empty
// or says what is wrong (an unknown symbol, with its stage).
struct ParsedLayout {
  std::vector<std::string> stages;
  std::string error;
};
ParsedLayout parse_pipeline_layout(std::string_view text);

// Every chunk's plan, indexed [chunk · pp + pp_rank] (virtual-stage order). Throws
// std::invalid_argument when the scenario asks for a partition Megatron refuses;
// validate() reports those first, naming the field.
std::vector<ChunkPlan> pipeline_partition(const Scenario& s);
ChunkPlan plan_chunk(const Scenario& s, int pp_rank, int chunk);
// Transformer layers held by pp rank `pp_rank` over all its chunks.
int stage_num_layers(const Scenario& s, int pp_rank);
// Whether the scenario asks for anything but the even split.
bool uneven_pipeline(const Scenario& s);
// Multi-token prediction on a virtual stage apart from the loss (Megatron's
// mtp_standalone, set by validate_layer_layout): its chunk sends the concatenated hidden
// states [h0 | depth 1 | … | depth D] on, so pipeline tensors change shape after it and
// Megatron exchanges every p2p's shapes first.
bool mtp_standalone(const Scenario& s);
// The pp ranks of the embedding group when they are not Megatron-Core's default first and
// last (empty): with MTP on a stage of its own, pretrain_gpt.py's get_embedding_ranks — the
// first stage, the MTP stage and, with tied embeddings, the last.
std::vector<int> embedding_stages(const Scenario& s);
// Whether pp ranks 1 … pp − 2 hold the same number of layers in every chunk (true for all
// of Megatron's partitions but a layout string's), so one of them stands for all.
bool middle_stages_alike(const Scenario& s);

}  // namespace tandem
