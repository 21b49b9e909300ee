// GPU training-step benchmark: GPT-2 d12 (124M), d24 (350M), d48 (1.5B) on the
// cuda backend (BF16), one optimizer step = forward + backward + AdamW.
// Prints per model and recompute policy: tokens/s, MFU against the device's
// dense BF16 peak (table in backend/cuda/device.cpp, or --peak-tflops; model
// FLOPs only, recompute not counted, as MFU is defined), step time, and the
// peak device memory (everything the backend holds, in one arena sized by
// model/memory.h) next to that accounting.
//
//   bench_gpu_train [--models d12,d24,d48] [--recompute none,gelu,gelu+ln,blocks]
//                   [--attention auto|flash|cudnn|materialized] [--batch 8] [--seq 1024]
//                   [--max-seq-len N] [--steps 10] [--warmup 3] [--peak-tflops X] [--json]
// --attention is `ratchet train`'s (default auto: cudnn where it runs); with cudnn the arena holds
// cuDNN's accounted workspace, so peak == accounting checks it too.
// --max-seq-len: the presets' position table (GPT-2's wpe), 1024 by default or
// --seq when that is longer (long context: --seq 8192 builds a model of 8192
// positions); --seq above --max-seq-len is bad input.
// Exit codes (bench/bench_main.h): 0, 1 a check failed (peak != accounting),
// 2 bad input (checked before the device is looked for), 69 no usable device.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <sstream>
#include <string>
#include <vector>

#include "../bench_main.h"
#include "backend/attention_choice.h"
#include "backend/cuda/cuda_backend.h"
#include "core/json.h"
#include "core/rng.h"
#include "model/config.h"
#include "model/gpt.h"
#include "model/memory.h"
#include "model/recompute.h"
#include "optim/adamw.h"

using namespace ratchet;

namespace {

int run(int argc, char** argv) {
  using bench::parse_int_flag;
  std::string models = "d12,d24,d48", policies = "none,gelu,gelu+ln,blocks";
  std::string attention_request = "auto";  // `ratchet train`'s default
  int B = 8, T = 1024, steps = 10, warmup = 3, max_seq = 0;
  double peak = 0;
  bool json = false;
  for (int i = 1; i < argc; i++) {
    std::string a = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) fail(a, " needs a value");
      return argv[++i];
    };
    if (a == "--models") models = next();
    else if (a == "--recompute") policies = next();
    else if (a == "--attention") { attention_request = next(); check_attention_request(attention_request); }
    else if (a == "--batch") B = (int)parse_int_flag(a, next(), 1, 1 << 20);
    else if (a == "--seq") T = (int)parse_int_flag(a, next(), 1, 1 << 24);
    else if (a == "--max-seq-len") max_seq = (int)parse_int_flag(a, next(), 1, 1 << 24);
    else if (a == "--steps") steps = (int)parse_int_flag(a, next(), 1, 1 << 30);
    else if (a == "--warmup") warmup = (int)parse_int_flag(a, next(), 0, 1 << 30);
    else if (a == "--peak-tflops") peak = bench::parse_double_flag(a, next());
    else if (a == "--json") json = true;
    else {
      std::fprintf(stderr,
                   "usage: %s [--models d12,d24,d48|tiny] [--recompute none,gelu,gelu+ln,blocks] "
                   "[--attention auto|flash|cudnn|materialized] [--batch B] [--seq T] [--max-seq-len N] "
                   "[--steps N] [--warmup N] [--peak-tflops X] [--json]\n",
                   argv[0]);
      if (a == "--help") return 0;
      fail("unknown option '", a, "'");
    }
  }
  // Every flag is checked before the device is looked for: bad input is exit 2
  // on any machine.
  if (max_seq == 0) max_seq = std::max(1024, T);
  if (T > max_seq)
    fail("--seq ", T, " is longer than --max-seq-len ", max_seq,
         ": raise --max-seq-len (the model's position table) to at least ", T);
  std::vector<Recompute> policy_list;
  {
    std::stringstream ps(policies);
    std::string pname;
    while (std::getline(ps, pname, ',')) policy_list.push_back(parse_recompute(pname));
  }
  std::vector<std::pair<std::string, GPTConfig>> configs;
  {
    std::stringstream ms(models);
    std::string name;
    while (std::getline(ms, name, ',')) {
      GPTConfig cfg;
      if (name == "tiny") {  // smoke shape for the simt build
        cfg.num_layers = 2, cfg.num_heads = 2, cfg.channels = 64, cfg.vocab_size = 256;
        cfg.max_seq_len = 32, cfg.padded_vocab = 0;
        cfg.finalize();
      } else {
        cfg = preset_config(name, 50257, max_seq);
      }
      configs.emplace_back(name, cfg);
    }
  }
  std::string why;
  if (!cuda::device_available(&why)) {
    std::fprintf(stderr, "bench_gpu_train: no usable CUDA device (%s): run it on a GPU node\n",
                 why.c_str());
    return bench::kExitNoDevice;
  }
  const cuda::DeviceInfo dev = cuda::device_info();
  // --attention resolved per model as `ratchet train` resolves it (auto: cudnn
  // where it runs, else flash); an explicit cudnn under simt, or in a build
  // without cuDNN, is an Error, exit 2.
  const AttentionDevice adev = cuda_attention_device();
  if (peak <= 0) peak = cuda::bf16_peak_tflops(dev.name);
  if (!json)
    std::printf("device %s, %.1f GiB, BF16 peak %s\n", dev.name.c_str(),
                dev.total_bytes / 1073741824.0,
                peak > 0 ? (std::to_string((int)peak) + " TFLOP/s").c_str()
                         : "unknown (pass --peak-tflops for MFU)");
  for (const auto& [name, cfg] : configs) {
    const AttentionChoice choice = choose_attention(
        attention_request, adev, 2, AttentionHeads{cfg.num_heads, cfg.kv_heads(), cfg.head_size()});
    const AttentionImpl attention = choice.impl;
    { cuda::CudaBackend<kernels::bf16> probe(attention); }
    if (!json) std::printf("%s: %s\n", name.c_str(), choice.note.c_str());
    int b = B, t = T;
    if (name == "tiny") b = 2, t = 32;
    for (const Recompute& policy : policy_list) {
      cuda::CudaBackend<kernels::bf16> be(attention);
      const StepMemory acct = step_memory(cfg, b, t, policy, be, ParamLayout(cfg).total, 0);
      be.use_arena(acct.arena());
      GPT model(cfg, be);
      model.set_recompute(policy);
      model.init_random(1);
      AdamW opt(be, model.layout(), AdamWConfig{});
      Rng rng(2);
      std::vector<int32_t> tok((size_t)b * t + 1);
      for (auto& x : tok) x = (int32_t)rng.below(cfg.vocab_size);
      auto step = [&] {
        model.zero_grad();
        model.forward_backward(tok.data(), tok.data() + 1, b, t, 1.0f);
        opt.step(model.params(), model.grads(), 1e-4f);
        be.synchronize();
      };
      for (int i = 0; i < warmup; i++) step();
      auto t0 = std::chrono::steady_clock::now();
      for (int i = 0; i < steps; i++) step();
      const double dt =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / steps;
      const double tok_s = (double)b * t / dt;
      const double mfu = peak > 0 ? train_flops_per_token(cfg, t) * tok_s / (peak * 1e12) : 0;
      const double peak_mem = (double)be.peak_bytes_in_use();
      if (json)
        std::printf("%s\n", json_line({{"model", name},
                                        {"recompute", policy.name()},
                                        {"attention", attention_name(attention)},
                                        {"B", b},
                                        {"T", t},
                                        {"step_ms", dt * 1e3},
                                        {"tokens_per_s", tok_s},
                                        {"mfu", mfu},
                                        {"peak_mem_bytes", json_number(peak_mem)},
                                        {"accounted_bytes", acct.total()},
                                        {"activation_bytes", acct.activations}})
                                 .c_str());
      else
        std::printf("%-4s recompute %-8s %s B=%d T=%d  %8.1f ms/step  %10.0f tok/s  MFU %5.1f%%  "
                    "peak mem %.2f GiB (accounting %.2f GiB, activations %.2f GiB)\n",
                    name.c_str(), policy.name().c_str(), attention_name(attention), b, t,
                    dt * 1e3, tok_s, mfu * 100,
                    peak_mem / 1073741824.0, acct.total() / 1073741824.0,
                    acct.activations / 1073741824.0);
      if (be.peak_bytes_in_use() != acct.total()) {
        std::fprintf(stderr,
                     "bench_gpu_train: %s %s: peak device memory %zu bytes != accounting %zu "
                     "(src/model/memory.h is out of date)\n",
                     name.c_str(), policy.name().c_str(), be.peak_bytes_in_use(), acct.total());
        return 1;
      }
    }
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  return bench::bench_main("bench_gpu_train", [&] { return run(argc, argv); });
}
