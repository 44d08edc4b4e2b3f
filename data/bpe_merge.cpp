// Both merge loops. The queue version keeps the symbols in a linked list over their
// original positions and drops queue entries that a neighbouring merge made stale.
#include "data/bpe_merge.hpp"

#include <queue>

namespace tandem::data {

void merge_in_rounds(const Gpt2Vocabulary& vocab, std::vector<std::int32_t>& word) {
  std::vector<std::int32_t> merged;
  while (word.size() > 1) {
    const Gpt2Merge* best = nullptr;
    std::uint64_t best_key = 0;
    for (std::size_t i = 0; i + 1 < word.size(); ++i) {
      const std::uint64_t key = pair_key(word[i], word[i + 1]);
      const auto it = vocab.merges.find(key);
      if (it != vocab.merges.end() && (!best || it->second.rank < best->rank)) {
        best = &it->second;
        best_key = key;
      }
    }
    if (!best) return;
    merged.clear();
    for (std::size_t i = 0; i < word.size(); ++i) {
      if (i + 1 < word.size() && pair_key(word[i], word[i + 1]) == best_key) {
        merged.push_back(best->result);
        ++i;
      } else {
        merged.push_back(word[i]);
      }
    }
    word.swap(merged);
  }
}

namespace {

struct Candidate {
  std::int32_t rank;
  std::int64_t left, right;        // positions of the pair's symbols
  std::int32_t left_id, right_id;  // their ids when queued (a merge changes the left id)
  bool operator>(const Candidate& o) const {
    return rank != o.rank ? rank > o.rank : left > o.left;
  }
};

}  // namespace

void merge_by_queue(const Gpt2Vocabulary& vocab, std::vector<std::int32_t>& word) {
  const auto n = static_cast<std::int64_t>(word.size());
  std::vector<std::int64_t> prev(word.size()), next(word.size());  // -1 / n: none
  std::vector<bool> alive(word.size(), true);
  for (std::int64_t i = 0; i < n; ++i) prev[i] = i - 1, next[i] = i + 1;
  std::priority_queue<Candidate, std::vector<Candidate>, std::greater<>> queue;
  const auto offer = [&](std::int64_t left, std::int64_t right) {
    if (left < 0 || right >= n) return;
    const auto it = vocab.merges.find(pair_key(word[left], word[right]));
    if (it != vocab.merges.end())
      queue.push({it->second.rank, left, right, word[left], word[right]});
  };
  for (std::int64_t i = 0; i + 1 < n; ++i) offer(i, i + 1);
  while (!queue.empty()) {
    const Candidate c = queue.top();
    queue.pop();
    if (!alive[c.left] || !alive[c.right] || next[c.left] != c.right || word[c.left] != c.left_id ||
        word[c.right] != c.right_id)
      continue;  // a merge next to it changed this pair
    word[c.left] = vocab.merges.at(pair_key(c.left_id, c.right_id)).result;
    alive[c.right] = false;
    next[c.left] = next[c.right];
    if (next[c.right] < n) prev[next[c.right]] = c.left;
    offer(prev[c.left], c.left);
    offer(c.left, next[c.left]);
  }
  std::vector<std::int32_t> merged;
  for (std::int64_t i = 0; i < n; i = next[i]) merged.push_back(word[i]);
  word.swap(merged);
}

}  // namespace tandem::data
