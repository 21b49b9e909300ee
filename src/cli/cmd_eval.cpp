// `ratchet eval`: a model (checkpoint, llm.c .bin or Hugging Face directory)
// on multiple-choice tasks and named token shards, scored by eval/mc_score.h
// and eval/data_score.h; the model and its tokenizer come from
// eval/model_source.h.
#include <boost/program_options.hpp>
#include <cstdio>
#include <ctime>
#include <fstream>
#include <sstream>
#include <thread>

#include "backend/attention_choice.h"
#include "backend/attention_impl.h"
#include "backend/backend.h"
#include "cli/commands.h"
#include "cli/options_util.h"
#include "core/error.h"
#include "core/json.h"
#include "core/log.h"
#include "model/attention_heads.h"
#include "tokenizer/gpt2_tokenizer.h"
#include "tokenizer/tokenizer_json.h"
#include "eval/data_score.h"
#include "eval/mc_score.h"
#include "eval/metrics.h"
#include "eval/named_path.h"
#include "eval/model_source.h"

namespace po = boost::program_options;

namespace ratchet {
namespace {

const char* kUsage = "usage: ratchet eval --init-from MODEL [--tokenizer T] --task NAME=FILE ... "
                     "--data NAME=GLOB ... [--batch-size B] [--json]\n";

const char* kHelp = R"(
MODEL: a checkpoint directory (CKPT_DIR: its newest valid checkpoint, or one
CKPT_DIR/step_N), an llm.c GPT-2 .bin, or a Hugging Face directory.

tasks (--task NAME=FILE, any number): multiple-choice files, detected by content:
  HellaSwag's jsonl        {"ctx": ..., "endings": [...], "label": 2}
  a generic jsonl          {"context": ..., "choices": [...], "label": 0}
  llm.c's HellaSwag .bin   magic 20240522 (GPT-2 ids: needs the gpt2 tokenizer)
Completion k is the context, a space, then ending k, tokenized with the model's
tokenizer as lm-evaluation-harness does. With lp_k the summed log-probability
of ending k's tokens given everything before them:
  acc             argmax_k lp_k                      (lm-evaluation-harness `acc`)
  acc_norm        argmax_k lp_k / characters of ending k, without the joining
                  space                              (lm-evaluation-harness `acc_norm`)
  acc_token_mean  argmax_k lp_k / tokens of ending k (llm.c's HellaSwag score)
Ties go to the lowest index. Each comes with its standard error
sqrt(p(1-p)/(n-1)). A completion longer than --seq-len + 1 tokens loses the
start of its context (as llm.c does; the count is reported as `truncated`).

data (--data NAME=GLOB, any number): token shards (as `ratchet train --val-data`),
cut into windows of --seq-len + 1 tokens at stride --seq-len; reports the mean
loss (nats per token), ppl = exp(loss) and the tokens scored.

examples:
  ratchet eval --init-from gpt2_124M.bin --tokenizer gpt2 \
      --task hellaswag=hellaswag_val.jsonl --json
  ratchet eval --init-from ckpt/ --task kjv=data_tools/tasks/kjv_complete_verse.jsonl \
      --data val='data/val_*.h5'

--json prints one object:
  {"model": ..., "tokenizer": ..., "tasks": {NAME: {"acc", "acc_se", "acc_norm",
   "acc_norm_se", "acc_token_mean", "acc_token_mean_se", "n", "truncated", "tokens",
   "positions", "seconds", "cpu_seconds"}}, "data": {NAME: {"loss", "ppl", "tokens",
   "seconds", "cpu_seconds"}}}
  (a task's tokens: its completions' input tokens; positions: what the model
  ran, padding to each batch's longest row included)
)";

struct Flags {
  std::string init_from, tokenizer, vocab, merges, per_example;
  std::vector<std::string> tasks, data;
  int batch_size = 16, seq_len = 0, threads = 0;
  long max_batches = 0;
  std::string device = "cpu", storage = "bf16", attention = "auto";
  bool json = false;
};

po::options_description make_options(Flags& f) {
  po::options_description d("options");
  d.add_options()
    ("help,h", "show this help")
    ("init-from", po::value(&f.init_from), "the model: checkpoint directory, llm.c .bin or Hugging Face directory")
    ("tokenizer", po::value(&f.tokenizer),
     "tokenizes the task files: byte, gpt2, or any `ratchet shard --tokenizer` takes (default: "
     "the one the model implies: a checkpoint's training shards, a Hugging Face directory's "
     "tokenizer.json, else the one known tokenizer of its vocab)")
    ("vocab", po::value(&f.vocab), "gpt2: encoder.json (default: $RATCHET_GPT2_DIR)")
    ("merges", po::value(&f.merges), "gpt2: vocab.bpe (default: $RATCHET_GPT2_DIR)")
    ("task", po::value(&f.tasks)->composing(), "NAME=FILE: a multiple-choice task (repeatable)")
    ("data", po::value(&f.data)->composing(), "NAME=GLOB: token shards to report loss and ppl on (repeatable)")
    ("batch-size,B", po::value(&f.batch_size)->default_value(f.batch_size),
     "rows per forward: completions (of several examples, the longest first), or --data windows")
    ("seq-len,T", po::value(&f.seq_len),
     "longest row: completions are left-truncated to it, --data windows are this long (default: "
     "the model's max_seq_len)")
    ("max-batches", po::value(&f.max_batches)->default_value(f.max_batches),
     "--data: score only the first N batches of each set (0: all)")
    ("device", po::value(&f.device)->default_value(f.device),
     "cpu, cuda, auto or simt (the cuda backend run on the CPU; in `ratchet-simt`)")
    ("storage", po::value(&f.storage)->default_value(f.storage), "cuda/simt storage: bf16 or f32")
    ("attention", po::value(&f.attention)->default_value(f.attention), "cuda/simt: auto, flash, ...")
    ("threads", po::value(&f.threads)->default_value(f.threads), "CPU threads (0: all cores)")
    ("per-example", po::value(&f.per_example),
     "write every example's scores to FILE as jsonl (task, line, label, logprob, tokens, the three "
     "predictions, truncated)")
    ("json", po::bool_switch(&f.json), "print one JSON object (the log goes to stderr)");
  return d;
}

// CPU seconds of this process, all threads (for benchmarks on a shared machine).
double cpu_seconds() { return (double)std::clock() / CLOCKS_PER_SEC; }

#define ELOG(...)                                                 \
  do {                                                            \
    if (log_rank() == 0) std::fprintf(stderr, __VA_ARGS__);       \
  } while (0)

}  // namespace

int cmd_eval(int argc, char** argv) {
  Flags f;
  po::options_description desc = make_options(f);
  po::variables_map vm;
  if (!parse_options(argc, argv, desc, vm, "eval", nullptr, true)) return kExitUsage;
  if (vm.count("help")) {
    std::printf("%s\n%s%s", kUsage, [&] { std::ostringstream o; o << desc; return o.str(); }().c_str(),
                kHelp);
    return kExitOk;
  }
  if (f.init_from.empty()) fail("--init-from MODEL is required: the model to evaluate (see --help)");
  if (f.tasks.empty() && f.data.empty())
    fail("nothing to evaluate: give --task NAME=FILE and/or --data NAME=GLOB");
  if (f.batch_size < 1) fail("--batch-size must be at least 1 (got ", f.batch_size, ")");
  if (vm.count("seq-len") && f.seq_len < 1) fail("--seq-len must be at least 1 (got ", f.seq_len, ")");
  if (f.max_batches < 0) fail("--max-batches must be 0 (all) or more (got ", f.max_batches, ")");
  if (f.threads < 0) fail("--threads ", f.threads, " is negative: pass 0 for all cores");
  std::vector<std::pair<std::string, std::string>> tasks, data;
  auto add_named = [](std::vector<std::pair<std::string, std::string>>& v, const char* flag,
                      const std::string& s) {
    auto nv = parse_named_path(flag, s);
    for (const auto& x : v)
      if (x.first == nv.first) fail(flag, " name '", nv.first, "' is given twice: names must differ");
    v.push_back(nv);
  };
  for (const auto& s : f.tasks) add_named(tasks, "--task", s);
  for (const auto& s : f.data) add_named(data, "--data", s);
  if (f.attention != "auto") check_attention_request(f.attention);
  if (!f.per_example.empty() && f.tasks.empty())
    fail("--per-example ", f.per_example, " writes each --task example's scores, and this run has "
         "no --task: add one, or drop --per-example (--data reports only a loss per set)");

  auto comm = make_communicator();
  if (!f.per_example.empty() && comm->world() > 1)
    fail("--per-example writes one process's examples: run it on one rank");

  // The model, then the tokenizer it implies (or --tokenizer).
  ModelSource src = load_model_source(f.init_from);
  ELOG("eval: model %s (%s%s): %s\n", src.path.c_str(), src.kind.c_str(),
       src.step >= 0 ? (", step " + std::to_string(src.step)).c_str() : "", src.cfg.describe().c_str());
  std::string tok_name = f.tokenizer;
  if (tok_name.empty() && !tasks.empty() && src.tokenizer.empty())
      fail("cannot tell which tokenizer --init-from ", f.init_from, " uses (vocab ", src.cfg.vocab_size,
           "): pass --tokenizer (byte or gpt2, whichever its training shards were made with)");
  if (tok_name.empty() && !src.tokenizer.empty()) {
    tok_name = src.tokenizer;
    ELOG("eval: tokenizer %s (from %s; --tokenizer overrides)\n", tok_name.c_str(),
         src.tokenizer_from.c_str());
  }
  check_tokenizer_files(tok_name, {f.vocab, f.merges});
  std::unique_ptr<Tokenizer> tok;
  if (!tok_name.empty()) {
    tok = make_tokenizer(tok_name, "--tokenizer", TokenizerFiles{f.vocab, f.merges});
    if (tok->vocab_size() > src.cfg.vocab_size)
      fail("--tokenizer ", tok_name, " has vocab ", tok->vocab_size(), " but the model --init-from ",
           f.init_from, " embeds only ", src.cfg.vocab_size,
           " ids: pass the tokenizer the model was trained with");
  }
  const int T = vm.count("seq-len") ? f.seq_len : src.cfg.max_seq_len;
  if (T > src.cfg.max_seq_len)
    fail("--seq-len ", T, " exceeds the model's max_seq_len ", src.cfg.max_seq_len);

  // Every input is read and checked before the model is built.
  std::vector<McTask> loaded;
  for (const auto& [name, path] : tasks) {
    loaded.push_back(load_mc_task(name, path, *tok, src.cfg.vocab_size));
    const McTask& t = loaded.back();
    ELOG("eval: task %s: %zu examples from %s (%s)\n", name.c_str(), t.examples.size(), path.c_str(),
         t.format.c_str());
  }
  std::vector<std::unique_ptr<TokenDataset>> sets;
  for (const auto& [name, glob] : data) {
    sets.push_back(std::make_unique<TokenDataset>(glob, "--data " + name));
    const TokenDataset& ds = *sets.back();
    // A tokenizer.json by its digest, not the path it was read from (issue 36).
    const auto* hf = dynamic_cast<const HfTokenizer*>(tok.get());
    const bool same = hf && !ds.meta().tokenizer_sha256.empty()
                          ? hf->sha256() == ds.meta().tokenizer_sha256
                          : ds.tokenizer() == tok_name;
    if (!tok_name.empty() && !same)
      fail("--data ", name, "=", glob, " was tokenized with '", ds.tokenizer(), "' but the model's "
           "tokenizer is '", tok_name, "': its loss would be meaningless; pass shards made with --tokenizer ",
           tok_name);
    ds.check_vocab(src.cfg.vocab_size);
    ELOG("eval: data %s: %s\n", name.c_str(), ds.describe().c_str());
  }

  BackendOptions bo;
  bo.device = f.device;
  bo.threads = f.threads > 0 ? f.threads
                             : std::max(1, (int)std::thread::hardware_concurrency() / comm->local_world());
  bo.storage = f.storage;
  bo.attention_auto = f.attention == "auto";
  if (!bo.attention_auto) bo.attention = parse_attention(f.attention);
  bo.heads = attention_heads(src.cfg);
  if (comm->world() > 1 && (f.device == "cuda" || f.device == "auto"))
    select_device_for_local_rank(comm->local_rank(), comm->local_world());
  std::string note;
  auto be = make_backend(bo, &note);
  if (!note.empty()) ELOG("%s\n", note.c_str());
  GPT model(src.cfg, *be);
  model.set_params(src.params.data());
  if (!src.moe_bias.empty()) model.set_moe_bias(src.moe_bias);  // routes as it was trained
  src.params = {};

  OrderedJson out;
  out["model"] = src.path;
  out["tokenizer"] = tok_name.empty() ? OrderedJson(nullptr) : OrderedJson(tok_name);
  out["backend"] = be->name();
  out["batch_size"] = f.batch_size;
  out["seq_len"] = T;
  OrderedJson jt = OrderedJson::object(), jd = OrderedJson::object();
  // Results: stdout, or stderr beside --json's one object.
#define SAY(...)                                                        \
  do {                                                                  \
    if (log_rank() == 0) std::fprintf(f.json ? stderr : stdout, __VA_ARGS__); \
  } while (0)
  std::ofstream per;
  if (!f.per_example.empty()) {
    per.open(f.per_example);
    if (!per) fail("--per-example ", f.per_example, ": cannot write there");
  }
  for (const McTask& t : loaded) {
    const double t0 = now_s(), c0 = cpu_seconds();
    std::vector<McExampleResult> det;
    const McScores s = score_mc_task(model, t, f.batch_size, T, *comm, per.is_open() ? &det : nullptr);
    const double dt = now_s() - t0;
    jt[t.name] = to_json(s);
    jt[t.name]["seconds"] = dt;
    jt[t.name]["cpu_seconds"] = cpu_seconds() - c0;
    for (const auto& r : det) {
      OrderedJson j;
      j["task"] = t.name;
      j["line"] = t.examples[r.index].line;
      j["label"] = t.examples[r.index].label;
      j["logprob"] = r.logprob;
      j["tokens"] = r.tokens;
      j["pred_acc"] = r.pred_acc;
      j["pred_acc_norm"] = r.pred_norm;
      j["pred_acc_token_mean"] = r.pred_token_mean;
      j["truncated"] = r.truncated;
      per << json_line(j) << "\n";
    }
    SAY("task %s: acc %.4f ± %.4f  acc_norm %.4f ± %.4f  acc_token_mean %.4f ± %.4f  (n %ld%s, %.1f s)\n",
           t.name.c_str(), s.acc, s.acc_se, s.acc_norm, s.acc_norm_se, s.acc_token_mean,
           s.acc_token_mean_se, s.n,
           s.truncated ? (", " + std::to_string(s.truncated) + " with a left-truncated context").c_str() : "",
           dt);
  }
  for (size_t i = 0; i < data.size(); i++) {
    const double t0 = now_s(), c0 = cpu_seconds();
    const DataScores s = score_data(model, *sets[i], f.batch_size, T, *comm, f.max_batches);
    jd[data[i].first] = to_json(s);
    jd[data[i].first]["seconds"] = now_s() - t0;
    jd[data[i].first]["cpu_seconds"] = cpu_seconds() - c0;
    SAY("data %s: loss %.4f  ppl %.3f  (%ld tokens, %.1f s)\n", data[i].first.c_str(), s.loss, s.ppl,
         s.tokens, now_s() - t0);
  }
  out["tasks"] = jt;
  out["data"] = jd;
  if (per.is_open()) {
    per.close();
    if (!per) fail("--per-example ", f.per_example, ": writing failed");
  }
  if (f.json && comm->rank() == 0) std::printf("%s\n", json_line(out).c_str());
  return kExitOk;
}

}  // namespace ratchet
