#include "tokenizer/tokenizer_json.h"

#include <cstdlib>

#include "core/error.h"
#include "tokenizer/gpt2_pretokenize.h"
#include "tokenizer/gpt2_tokenizer.h"
#include "tokenizer/json/engine.h"
#include "tokenizer/json/fast_split.h"
#include "tokenizer/json/piece_cache.h"
#include "tokenizer/json/text.h"

namespace ratchet {
namespace hf {
std::string Engine::token_string(uint32_t id) const {
  auto it = added_index.find(id);
  if (it != added_index.end()) return added[it->second].content;
  return id < model.token_of.size() ? model.token_of[id] : std::string();
}

std::vector<uint32_t> Engine::encode(const std::string& input, bool parse_special) const {
  struct Cache {
    uint64_t owner = 0;
    PieceCache pieces;
  };
  thread_local Cache cache;
  if (cache.owner != instance) {
    cache.pieces.clear();
    cache.owner = instance;
  }
  std::string escaped;
  const bool escapes = escape_invalid(input, &escaped);
  const std::string_view text = escapes ? std::string_view(escaped) : std::string_view(input);
  std::vector<uint32_t> out;
  out.reserve(text.size() / 3 + 1);
  std::vector<std::unique_ptr<std::string>> arena;
  std::vector<Piece> pieces;

  auto model_piece = [&](std::string_view p) {
    if (p.size() == 1 && model.byte_level && model.byte_id[(unsigned char)p[0]] != BpeModel::kNone) {
      out.push_back(model.byte_id[(unsigned char)p[0]]);
      return;
    }
    if (p.size() > PieceCache::kMaxPiece) {  // a long piece (a whole line or document) is unique
      model.tokenize(p, out);
      return;
    }
    const uint64_t h = PieceCache::hash(p);
    size_t n;
    if (const uint32_t* ids = cache.pieces.find(p, h, &n)) {
      out.insert(out.end(), ids, ids + n);
      return;
    }
    const size_t before = out.size();
    model.tokenize(p, out);
    if (out.size() - before <= 0xFFFF)
      cache.pieces.insert(p, h, out.data() + before, out.size() - before);
  };
  // What the pre-tokenizers hand the model, cut further where no merge can
  // cross (BpeModel::next_cut: Llama 2's and Gemma's whole text at its words).
  auto model_input = [&](std::string_view p) {
    if (!model.space_cut) {
      model_piece(p);
      return;
    }
    for (size_t a = 0; a < p.size();) {
      const size_t b = model.next_cut(p, a);
      model_piece(p.substr(a, b - a));
      a = b;
    }
  };
  // GPT-2's configuration (one ByteLevel stage on GPT-2's regex, no prefix
  // space, no escapes to undo): the hand-written splitter straight to the model.
  const bool gpt2_direct = !escapes && pre_tokenizers.size() == 1 &&
                           pre_tokenizers[0].kind == PreTokenizer::kByteLevel &&
                           pre_tokenizers[0].gpt2_fast && !pre_tokenizers[0].add_prefix_space;
  // Llama 3's and Qwen's configuration (the fast-path Split, Isolated, then a
  // ByteLevel without its regex or prefix space): the splitter's pieces
  // straight to the model, one at a time.
  const int llama3_direct =
      !escapes && pre_tokenizers.size() == 2 && pre_tokenizers[0].kind == PreTokenizer::kSplit &&
              pre_tokenizers[0].llama3_fast && pre_tokenizers[0].behavior == PreTokenizer::kIsolated &&
              !pre_tokenizers[0].invert && pre_tokenizers[1].kind == PreTokenizer::kByteLevel &&
              !pre_tokenizers[1].add_prefix_space && !pre_tokenizers[1].use_regex
          ? pre_tokenizers[0].llama3_fast
          : 0;
  auto pre_and_model = [&](std::string_view seg, bool origin) {
    if (gpt2_direct) {
      Gpt2Splitter sp(seg);
      std::string_view p;
      while (sp.next(&p)) model_piece(p);
      return;
    }
    if (llama3_direct) {
      Llama3Splitter sp(seg, llama3_direct);
      std::string_view p;
      while (sp.next(&p)) model_piece(p);
      return;
    }
    arena.clear();
    pre_tokenize(pre_tokenizers, seg, origin, escapes, arena, &pieces);
    for (const Piece& p : pieces) model_input(p.s);
  };
  // Cuts `s` at the added tokens of `trie`, passing the text between them to `f`.
  auto cut = [&](const AddedTokens& trie, std::string_view s, bool origin, auto&& f) {
    size_t from = 0, seg = 0, a, b;
    const AddedToken* tok;
    while (!trie.empty() && trie.find(s, from, &a, &b, &tok)) {
      from = b;
      if (tok->special && !parse_special) continue;  // its spelling stays text
      if (a > seg) f(s.substr(seg, a - seg), origin && seg == 0);
      out.push_back(tok->id);
      seg = b;
    }
    if (s.size() > seg) f(s.substr(seg), origin && seg == 0);
  };
  cut(raw_added, text, true, [&](std::string_view seg, bool origin) {
    if (normalizers.empty()) {
      cut(norm_added, seg, origin, pre_and_model);
      return;
    }
    std::string n(seg);
    normalize(normalizers, n);
    cut(norm_added, n, origin, pre_and_model);
  });
  return out;
}

}  // namespace hf

HfTokenizer::HfTokenizer() = default;
HfTokenizer::~HfTokenizer() = default;

std::unique_ptr<HfTokenizer> HfTokenizer::load(const std::string& path) {
  std::unique_ptr<HfTokenizer> t(new HfTokenizer());
  t->e_ = hf::load_engine(path);
  return t;
}

std::unique_ptr<HfTokenizer> HfTokenizer::from_gpt2_files(const std::string& encoder_json,
                                                          const std::string& vocab_bpe) {
  Gpt2Tokenizer g(encoder_json, vocab_bpe);  // reads and checks the files
  return from_gpt2(g);
}

std::unique_ptr<HfTokenizer> HfTokenizer::from_gpt2(const Gpt2Tokenizer& g) {
  std::unique_ptr<HfTokenizer> t(new HfTokenizer());
  t->e_ = hf::gpt2_engine(g);
  return t;
}

std::string HfTokenizer::name() const { return e_->name; }
int HfTokenizer::vocab_size() const { return e_->vocab_size; }
int HfTokenizer::eot_token() const { return e_->eos; }
int HfTokenizer::bos_id() const { return e_->bos; }
int HfTokenizer::eos_id() const { return e_->eos; }
bool HfTokenizer::adds_bos() const { return e_->adds_bos; }
bool HfTokenizer::adds_eos() const { return e_->adds_eos; }
std::string HfTokenizer::sha256() const { return e_->sha256; }
const std::string& HfTokenizer::json_path() const { return e_->path; }

std::vector<uint32_t> HfTokenizer::encode(const std::string& text) const {
  return e_->encode(text, false);
}
std::vector<uint32_t> HfTokenizer::encode(const std::string& text, bool parse_special) const {
  return e_->encode(text, parse_special);
}

std::string HfTokenizer::decode(const std::vector<uint32_t>& ids) const {
  // Runs of known ids go through the decoders; an unknown id prints as
  // "<|id=N|>" between them (a model whose padded vocab is larger may sample one).
  std::string out;
  std::vector<std::string> tokens;
  auto flush = [&] {
    if (tokens.empty()) return;
    if (e_->has_decoder) {
      hf::decode_chain(e_->decoders, tokens);
      for (const std::string& t : tokens) out += t;
    } else {  // the Rust library joins with spaces when there is no decoder
      for (size_t i = 0; i < tokens.size(); i++) out += (i ? " " : "") + tokens[i];
    }
    tokens.clear();
  };
  for (uint32_t id : ids) {
    std::string t = e_->token_string(id);
    if (t.empty()) {
      flush();
      out += "<|id=" + std::to_string(id) + "|>";
    } else {
      tokens.push_back(std::move(t));
    }
  }
  flush();
  return out;
}

std::vector<std::string> HfTokenizer::pieces(const std::vector<uint32_t>& ids) const {
  std::vector<std::string> r;
  r.reserve(ids.size());
  for (uint32_t id : ids) {
    std::string t = e_->token_string(id);
    r.push_back(t.empty() ? "<|id=" + std::to_string(id) + "|>" : t);
  }
  return r;
}

int HfTokenizer::token_to_id(const std::string& token) const {
  for (const hf::AddedToken& a : e_->added)
    if (a.content == token) return (int)a.id;
  auto it = e_->model.id_of.find(token);
  return it == e_->model.id_of.end() ? -1 : (int)it->second;
}

std::string default_hf_tokenizers_dir() {
  const char* env = std::getenv("RATCHET_HF_TOKENIZERS_DIR");
  if (env && *env) return env;
  return "/usr/local/share/ratchet/hf-tokenizers";
}

}  // namespace ratchet
