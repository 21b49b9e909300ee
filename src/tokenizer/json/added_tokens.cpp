// Added-token matching of the tokenizer.json engine (see engine.h).
#include <algorithm>

#include "tokenizer/json/engine.h"

namespace ratchet::hf {

void AddedTokens::build(const std::vector<AddedToken>& tokens, bool normalized) {
  nodes_.assign(1, Node());
  std::fill(first_, first_ + 256, false);
  tokens_ = &tokens;
  for (size_t t = 0; t < tokens.size(); t++) {
    const AddedToken& tok = tokens[t];
    const std::string& pat = tok.match.empty() ? tok.content : tok.match;
    if (tok.normalized != normalized || pat.empty()) continue;
    first_[(unsigned char)pat[0]] = true;
    uint32_t n = 0;
    for (unsigned char c : pat) {
      auto& nx = nodes_[n].next;
      auto it = std::lower_bound(nx.begin(), nx.end(), std::make_pair(c, (uint32_t)0));
      if (it != nx.end() && it->first == c) {
        n = it->second;
      } else {
        uint32_t k = (uint32_t)nodes_.size();
        nx.insert(it, {c, k});
        nodes_.emplace_back();
        n = k;
      }
    }
    // Two entries with one content: the later one wins, as in a map.
    nodes_[n].token = (int64_t)t;
  }
}

bool AddedTokens::find(std::string_view s, size_t from, size_t* start, size_t* end,
                       const AddedToken** tok) const {
  if (nodes_.size() <= 1) return false;
  for (size_t i = from; i < s.size(); i++) {
    if (!first_[(unsigned char)s[i]]) continue;
    uint32_t n = 0;
    int64_t best = -1;
    size_t best_end = 0;
    for (size_t k = i; k < s.size(); k++) {
      const auto& nx = nodes_[n].next;
      const unsigned char c = (unsigned char)s[k];
      auto it = std::lower_bound(nx.begin(), nx.end(), std::make_pair(c, (uint32_t)0));
      if (it == nx.end() || it->first != c) break;
      n = it->second;
      if (nodes_[n].token >= 0) best = nodes_[n].token, best_end = k + 1;
    }
    if (best >= 0) {
      *start = i, *end = best_end, *tok = &(*tokens_)[(size_t)best];
      return true;
    }
  }
  return false;
}

}  // namespace ratchet::hf
