// `ratchet tokenize TOKENIZER TEXT`: the ids and pieces one tokenizer gives a
// text, for inspection (which tokenizer.json component does what, whether a
// special token was parsed, how a document will be sharded).
#include <boost/program_options.hpp>
#include <cstdio>
#include <iostream>
#include <iterator>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "cli/options_util.h"
#include "core/error.h"
#include "core/json.h"
#include "tokenizer/gpt2_tokenizer.h"
#include "tokenizer/json/unknown_counts.h"
#include "tokenizer/tokenizer_json.h"
#include "tokenizer/tokenizer.h"
#include "data_tools/commands.h"

namespace ratchet {
namespace po = boost::program_options;
namespace {

// A piece printed on one line: control bytes, backslash and bytes that are
// not valid UTF-8 as escapes.
std::string printable(const std::string& s) {
  std::string out;
  for (size_t i = 0; i < s.size(); i++) {
    unsigned char c = (unsigned char)s[i];
    char buf[8];
    if (c == '\\') out += "\\\\";
    else if (c == '\n') out += "\\n";
    else if (c == '\t') out += "\\t";
    else if (c == '\r') out += "\\r";
    else if (c < 0x20 || c == 0x7F) std::snprintf(buf, sizeof buf, "\\x%02x", c), out += buf;
    else out.push_back((char)c);
  }
  return out;
}

}  // namespace

int cmd_tokenize(int argc, char** argv) {
  std::string tok_name, text, vocab, merges;
  bool parse_special = false, as_json = false;
  po::options_description desc(
      "ratchet tokenize: the ids and pieces of a text\n\n"
      "usage: ratchet tokenize TOKENIZER TEXT [options]   (TEXT '-' reads stdin)\n\noptions");
  desc.add_options()("help,h", "show this help")(
      "tokenizer", po::value(&tok_name), "byte, gpt2, or a tokenizer.json / model directory")(
      "text", po::value(&text), "the text to encode ('-': standard input)")(
      "parse-special", po::bool_switch(&parse_special),
      "text that spells a special token becomes that token (gpt2, tokenizer.json)")(
      "json", po::bool_switch(&as_json), "print one JSON object (ids, pieces, decoded text)")(
      "vocab", po::value(&vocab), "gpt2: encoder.json (default: the installed one)")(
      "merges", po::value(&merges), "gpt2: vocab.bpe (default: the installed one)");
  po::positional_options_description pos;
  pos.add("tokenizer", 1).add("text", 1);
  po::variables_map vm;
  if (!parse_options(argc, argv, desc, vm, "tokenize", &pos, true)) return kExitUsage;
  if (vm.count("help")) {
    std::cout << desc << R"(
Prints the number of tokens, then one line per token: its id and its piece
as stored in the tokenizer (byte-level families spell bytes in GPT-2's byte
alphabet, e.g. 'Ġ' for a space; control characters are escaped), then the
decoded text. No BOS/EOS is added (as `ratchet shard` encodes a document).

Examples:
  ratchet tokenize gpt2 "Hello world"
  ratchet tokenize /models/Llama-3.2-1B "<|begin_of_text|>Hi" --parse-special
  ratchet tokenize tokenizer.json - --json < doc.txt
)";
    return kExitOk;
  }
  if (tok_name.empty() || !vm.count("text"))
    fail("ratchet tokenize needs a tokenizer and a text: ratchet tokenize TOKENIZER TEXT "
         "(see --help)");
  if (text == "-") text.assign(std::istreambuf_iterator<char>(std::cin), {});
  std::unique_ptr<Tokenizer> tok = make_tokenizer(tok_name, "tokenizer", {vocab, merges});
  const auto* hf = dynamic_cast<const HfTokenizer*>(tok.get());
  if (const auto* g = dynamic_cast<const Gpt2Tokenizer*>(tok.get())) hf = &g->engine();
  if (parse_special && !hf)
    fail("--parse-special applies to gpt2 and tokenizer.json tokenizers, not '", tok_name, "'");
  const hf::UnknownCounts before = hf::thread_unknown_counts();
  const std::vector<uint32_t> ids = hf ? hf->encode(text, parse_special) : tok->encode(text);
  // Not silent (issue 36): input the tokenizer has no token for.
  const hf::UnknownCounts& after = hf::thread_unknown_counts();
  if (after.unk_bytes > before.unk_bytes)
    std::fprintf(stderr, "tokenize: warning: %llu byte(s) of the text became the unk token\n",
                 (unsigned long long)(after.unk_bytes - before.unk_bytes));
  if (after.dropped_chars > before.dropped_chars)
    std::fprintf(stderr, "tokenize: warning: %llu character(s) of the text were dropped: no token "
                 "for them and no unk token (Hugging Face's library drops them too)\n",
                 (unsigned long long)(after.dropped_chars - before.dropped_chars));
  std::vector<std::string> pieces;
  if (hf) {
    pieces = hf->pieces(ids);
  } else {
    for (uint32_t id : ids) pieces.push_back(tok->decode({id}));
  }
  const std::string decoded = tok->decode(ids);
  if (as_json) {
    nlohmann::json j;
    j["tokenizer"] = tok->name();
    j["vocab_size"] = tok->vocab_size();
    j["ids"] = ids;
    j["pieces"] = pieces;
    j["decoded"] = decoded;
    std::cout << j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
    return kExitOk;
  }
  std::printf("%s: %zu tokens\n", tok->name().c_str(), ids.size());
  for (size_t i = 0; i < ids.size(); i++)
    std::printf("%8u  %s\n", ids[i], printable(pieces[i]).c_str());
  std::printf("decoded: %s\n", printable(decoded).c_str());
  return kExitOk;
}

}  // namespace ratchet
