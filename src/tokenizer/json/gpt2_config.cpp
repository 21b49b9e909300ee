// GPT-2's vocabulary files as a configuration of the tokenizer.json engine:
// what GPT-2's tokenizer.json says, built from the tables Gpt2Tokenizer
// reads out of encoder.json + vocab.bpe (gpt2_tokenizer.h):
//   pre_tokenizer ByteLevel(add_prefix_space=false, use_regex=true)
//   model         BPE over encoder.json with vocab.bpe's merges
//   decoder       ByteLevel
//   added_tokens  <|endoftext|> (special), the end-of-text / EOS token
#include "tokenizer/gpt2_tokenizer.h"
#include "tokenizer/json/engine.h"
#include "tokenizer/json/text.h"

namespace ratchet::hf {

std::unique_ptr<Engine> gpt2_engine(const Gpt2Tokenizer& g) {
  auto e = std::make_unique<Engine>();
  e->name = Gpt2Tokenizer::kName;
  BpeModel& m = e->model;
  std::string byte_char[256];
  {
    // GPT-2's bytes_to_unicode(), as in load.cpp's make_byte_level.
    int n = 0;
    for (int b = 0; b < 256; b++) {
      bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
      append_utf8(byte_char[b], printable ? (uint32_t)b : (uint32_t)(256 + n++));
    }
  }
  const uint32_t eot = (uint32_t)g.eot_token();
  m.token_of.assign((size_t)g.vocab_size(), std::string());
  m.id_of.reserve((size_t)g.vocab_size());
  for (uint32_t id = 0; id < (uint32_t)g.vocab_size(); id++) {
    const std::string& raw = g.token_bytes(id);
    if (raw.empty()) continue;
    std::string spelled;
    if (id == eot) {
      spelled = Gpt2Tokenizer::kEotString;
    } else {
      for (unsigned char c : raw) spelled += byte_char[c];
    }
    m.token_of[id] = spelled;
    m.id_of.emplace(spelled, id);
  }
  m.merges = g.merges();
  m.num_merges = g.num_merges();
  std::fill(m.fallback_id, m.fallback_id + 256, BpeModel::kNone);
  e->added.push_back({Gpt2Tokenizer::kEotString, eot, true, false, Gpt2Tokenizer::kEotString});
  e->eos = (int)eot;

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
  return e;
}

}  // namespace ratchet::hf
