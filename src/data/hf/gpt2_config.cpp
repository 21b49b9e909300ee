// GPT-2's vocabulary files as a configuration of the tokenizer.json engine:
// what GPT-2's tokenizer.json says, built from encoder.json + vocab.bpe:
//   pre_tokenizer ByteLevel(add_prefix_space=false, use_regex=true)
//   model         BPE over encoder.json with vocab.bpe's merges
//   decoder       ByteLevel
//   added_tokens  <|endoftext|> (special), the end-of-text / EOS token
#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

#include "core/error.h"
#include "core/json.h"
#include "data/hf/engine.h"

namespace ratchet::hf {
namespace {

std::string read_whole(const std::string& path, const char* what) {
  std::ifstream f(path, std::ios::binary);
  if (!f) fail("cannot open ", what, " ", path, ": ", std::strerror(errno));
  std::ostringstream ss;
  ss << f.rdbuf();
  if (f.bad()) fail("cannot read ", what, " ", path, ": ", std::strerror(errno));
  return ss.str();
}

}  // namespace

std::unique_ptr<Engine> gpt2_engine(const std::string& encoder_json, const std::string& vocab_bpe) {
  static const char* kEot = "<|endoftext|>";
  auto e = std::make_unique<Engine>();
  e->name = "gpt2";
  BpeModel& m = e->model;
  const std::string V = "GPT-2 vocabulary (--vocab) " + encoder_json;
  const std::string text = read_whole(encoder_json, "GPT-2 vocabulary (--vocab)");
  nlohmann::json vocab;
  try {
    vocab = nlohmann::json::parse(text);
  } catch (const nlohmann::json::parse_error& ex) {
    fail(V, " is malformed at byte ", ex.byte, " (", ex.what(), "); pass GPT-2's encoder.json");
  }
  if (!vocab.is_object() || vocab.empty())
    fail(V, " is not a JSON object of token -> id; pass GPT-2's encoder.json");
  int64_t max_id = -1;
  for (auto it = vocab.begin(); it != vocab.end(); ++it) {
    if (!it->is_number_integer())
      fail(V, " is malformed: the value of \"", it.key(), "\" is not an integer; pass GPT-2's encoder.json");
    int64_t id = it->get<int64_t>();
    if (id < 0 || id >= (int64_t(1) << 31) - 1)
      fail(V, ": \"", it.key(), "\" has id ", id, ", outside [0, 2^31-1)");
    max_id = std::max(max_id, id);
  }
  m.token_of.assign((size_t)(max_id + 1), std::string());
  for (auto it = vocab.begin(); it != vocab.end(); ++it) {
    uint32_t id = it->get<uint32_t>();
    if (!m.token_of[id].empty())
      fail(V, ": id ", id, " is used twice; pass GPT-2's encoder.json");
    m.token_of[id] = it.key();
    m.id_of.emplace(it.key(), id);
  }
  auto eot = m.id_of.find(kEot);
  if (eot == m.id_of.end()) fail(V, " has no \"", kEot, "\" entry; pass GPT-2's encoder.json");
  e->added.push_back({kEot, eot->second, true, false, kEot});
  e->eos = (int)eot->second;
  std::fill(m.fallback_id, m.fallback_id + 256, BpeModel::kNone);

  const std::string M = "GPT-2 merges (--merges) " + vocab_bpe;
  const std::string merges = read_whole(vocab_bpe, "GPT-2 merges (--merges)");
  size_t pos = 0, line_no = 0;
  while (pos < merges.size()) {
    size_t nl = merges.find('\n', pos);
    if (nl == std::string::npos) nl = merges.size();
    std::string line = merges.substr(pos, nl - pos);
    pos = nl + 1;
    line_no++;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line_no == 1 && line.rfind("#version", 0) == 0) continue;
    if (line.empty()) continue;
    size_t sp = line.find(' ');
    if (sp == std::string::npos || sp == 0 || sp + 1 >= line.size() ||
        line.find(' ', sp + 1) != std::string::npos)
      fail(M, " line ", line_no, " is not two tokens separated by one space: '", line,
           "'; pass GPT-2's vocab.bpe");
    const std::string a = line.substr(0, sp), b = line.substr(sp + 1);
    auto ia = m.id_of.find(a), ib = m.id_of.find(b), im = m.id_of.find(a + b);
    if (ia == m.id_of.end() || ib == m.id_of.end() || im == m.id_of.end())
      fail(M, " line ", line_no, " ('", line, "') names a token that is not in ", encoder_json,
           ": the two files do not belong together");
    uint32_t r, mm;
    if (!m.merges.lookup(ia->second, ib->second, &r, &mm))  // the first (lowest) rank wins
      m.merges.add(ia->second, ib->second, (uint32_t)m.num_merges, im->second);
    m.num_merges++;
  }
  if (m.num_merges == 0) fail(M, " holds no merges; pass GPT-2's vocab.bpe");

  PreTokenizer bl;
  bl.kind = PreTokenizer::kByteLevel;
  bl.add_prefix_space = false;
  bl.use_regex = true;
  bl.pattern.regex = std::make_unique<Regex>(gpt2_regex(), "GPT-2's pre-tokenizer");
  bl.gpt2_fast = fast_paths_enabled();
  e->pre_tokenizers.push_back(std::move(bl));
  Decoder d;
  d.kind = Decoder::kByteLevel;
  e->decoders.push_back(std::move(d));
  e->has_decoder = true;
  finish(*e);
  for (int b = 0; b < 256; b++)
    if (m.byte_id[b] == BpeModel::kNone)
      fail(V, " has no token for byte ", b, "; pass GPT-2's encoder.json");
  return e;
}

}  // namespace ratchet::hf
