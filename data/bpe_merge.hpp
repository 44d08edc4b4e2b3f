// The BPE merge loop on token ids, two ways that give the same result: the reference's
// rounds (find the lowest-ranked adjacent pair, merge it everywhere left to right,
// repeat: O(n²) for a piece of n bytes, fine for words), and a priority queue of pairs
// (lowest rank, then leftmost, first: O(n log n), for long pieces such as base64 blobs),
// valid when the vocabulary's merges are ordered (Gpt2Vocabulary::merges_ordered).
#pragma once

#include <cstdint>
#include <vector>

#include "data/gpt2_vocabulary.hpp"

namespace tandem::data {

void merge_in_rounds(const Gpt2Vocabulary& vocab, std::vector<std::int32_t>& word);
void merge_by_queue(const Gpt2Vocabulary& vocab, std::vector<std::int32_t>& word);

}  // namespace tandem::data
