// `ratchet sample`: text from a trained model (a checkpoint, an llm.c .bin or
// a Hugging Face directory, as `ratchet eval` loads them) and its tokenizer:
// the prompt is encoded, train/sampler.h's generate() continues it, and the
// continuation is decoded with the same tokenizer.
#include <algorithm>
#include <boost/program_options.hpp>
#include <cmath>
#include <cstdio>
#include <iostream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "backend/backend.h"
#include "cli/commands.h"
#include "cli/options_util.h"
#include "core/error.h"
#include "core/rng.h"
#include "model/attention_heads.h"
#include "tokenizer/tokenizer_json.h"
#include "tokenizer/tokenizer.h"
#include "eval/model_source.h"
#include "model/gpt.h"
#include "train/sampler.h"

namespace po = boost::program_options;

namespace ratchet {

int cmd_sample(int argc, char** argv) {
  std::string init_from, tokenizer, prompt;
  int tokens = 100, threads = 0, max_context = 0;
  float temperature = 1.0f;
  uint64_t seed = 1337;
  bool no_stop = false;
  po::options_description d("ratchet sample: text from a trained model\n\noptions");
  // clang-format off
  d.add_options()
    ("help,h", "show this help")
    ("init-from", po::value(&init_from)->required(),
       "the model: a checkpoint directory (its newest valid checkpoint), an llm.c .bin, or a "
       "Hugging Face directory")
    ("tokenizer", po::value(&tokenizer),
       "byte, gpt2, or a tokenizer.json (or its directory); default: the model's own (a Hugging "
       "Face directory's tokenizer.json, a checkpoint's training shards' tokenizer)")
    ("prompt", po::value(&prompt)->default_value(""), "text to continue")
    ("tokens", po::value(&tokens)->default_value(tokens), "tokens to generate")
    ("temperature", po::value(&temperature)->default_value(temperature), "softmax temperature (0: greedy)")
    ("seed", po::value(&seed)->default_value(seed), "sampling seed")
    ("max-context", po::value(&max_context)->default_value(0),
       "tokens the model sees (0: its max_seq_len)")
    ("no-stop", po::bool_switch(&no_stop), "keep going past the end-of-text (EOS) token")
    ("threads", po::value(&threads)->default_value(0), "CPU threads (0: all cores)");
  // clang-format on
  po::variables_map vm;
  if (!parse_options(argc, argv, d, vm, "sample")) return kExitUsage;
  if (vm.count("help")) {
    std::cout << d << R"(
The prompt is encoded without special tokens (text that spells one stays
text), after the token a document starts with: BOS for a tokenizer that adds
one (Llama), else the end-of-text token. Generation stops at EOS unless
--no-stop. The CPU backend runs the model (FP32).

Examples:
  ratchet sample --init-from export/ --prompt "In the beginning" --tokens 50
  ratchet sample --init-from ckpt/ --tokenizer gpt2 --temperature 0.8 --seed 7
)";
    return kExitOk;
  }
  try {
    po::notify(vm);
  } catch (const po::error& e) {
    fail(e.what(), " (see `ratchet sample --help`)");
  }
  if (tokens < 0) fail("--tokens ", tokens, " is negative");
  if (!(temperature >= 0) || !std::isfinite(temperature))
    fail("--temperature ", temperature, " must be 0 (greedy) or a positive finite number");
  if (threads < 0) fail("--threads ", threads, " is negative: pass 0 for all cores");
  if (max_context < 0) fail("--max-context ", max_context, " is negative");

  ModelSource src = load_model_source(init_from, "--init-from", "sample");
  const std::string tok_name = tokenizer.empty() ? src.tokenizer : tokenizer;
  if (tok_name.empty())
    fail("--init-from ", init_from, ": no tokenizer is known for this model: pass --tokenizer");
  std::unique_ptr<Tokenizer> tok = make_tokenizer(tok_name, "--tokenizer");
  if (tok->vocab_size() > src.cfg.vocab_size)
    fail("--tokenizer ", tok_name, " has ", tok->vocab_size(), " tokens but the model's vocab is ",
         src.cfg.vocab_size, ": it is not this model's tokenizer");
  const auto* hf = dynamic_cast<const HfTokenizer*>(tok.get());
  const int eos = hf ? hf->eos_id() : tok->eot_token();
  std::vector<int32_t> ids;
  // The token a document follows in the shards: BOS, else the previous
  // document's EOS (byte, gpt2: the end-of-text token).
  ids.push_back(hf && hf->adds_bos() && hf->bos_id() >= 0 ? hf->bos_id() : std::max(eos, 0));
  for (uint32_t id : tok->encode(prompt)) ids.push_back((int32_t)id);
  const int ctx = max_context > 0 ? std::min(max_context, src.cfg.max_seq_len) : src.cfg.max_seq_len;

  BackendOptions bo;
  bo.device = "cpu";
  bo.threads = threads > 0 ? threads : std::max(1, (int)std::thread::hardware_concurrency());
  bo.heads = attention_heads(src.cfg);
  std::string note;
  auto be = make_backend(bo, &note);
  GPT model(src.cfg, *be);
  model.set_params(src.params.data());
  if (!src.moe_bias.empty()) model.set_moe_bias(src.moe_bias);  // routes as it was trained
  src.params = {};
  std::fprintf(stderr, "sample: %s (%s), tokenizer %s%s\n", src.path.c_str(), src.cfg.describe().c_str(),
               tok_name.c_str(), src.tokenizer_from.empty() || !tokenizer.empty()
                                     ? ""
                                     : (" (" + src.tokenizer_from + ")").c_str());

  // One token at a time, so that EOS can end it.
  Rng rng(seed);
  // The prompt and the continuation are decoded together (a SentencePiece
  // decoder treats the first token specially); BOS or the start token is not text.
  const size_t start = 1;
  std::string printed;
  for (int i = 0; i < tokens; i++) {
    generate(model, ids, 1, ctx, temperature, rng);
    if (!no_stop && ids.back() == eos) {
      ids.pop_back();  // the end, not text
      break;
    }
    // Decode the whole continuation and print what is new (a multi-byte
    // character may span tokens).
    const std::string text = tok->decode(std::vector<uint32_t>(ids.begin() + (long)start, ids.end()));
    if (text.size() > printed.size() && text.compare(0, printed.size(), printed) == 0) {
      std::fwrite(text.data() + printed.size(), 1, text.size() - printed.size(), stdout);
      std::fflush(stdout);
      printed = text;
    }
  }
  const std::string text = tok->decode(std::vector<uint32_t>(ids.begin() + (long)start, ids.end()));
  if (text.size() >= printed.size() && text.compare(0, printed.size(), printed) == 0)
    std::fwrite(text.data() + printed.size(), 1, text.size() - printed.size(), stdout);
  std::printf("\n");
  return kExitOk;
}

}  // namespace ratchet
