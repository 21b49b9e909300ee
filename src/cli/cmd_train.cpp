// `ratchet train`: options (command line and --config INI file) -> TrainOptions
// -> run_training().
#include <boost/program_options.hpp>
#include <fstream>
#include <sstream>
#include <cmath>
#include <cstdio>
#include <iostream>
#include <cstdlib>
#include <stdexcept>

#include "backend/attention_choice.h"
#include "cli/commands.h"
#include "cli/options_util.h"
#include "core/error.h"
#include "core/small_text_file.h"
#include "data/mixture.h"
#include "data/mixture_ini.h"
#include "distributed/communicator.h"
#include "train/trainer.h"

namespace po = boost::program_options;

namespace ratchet {

namespace {

const char* kExamples = R"(examples:
  # the demo: a 4-layer byte-level model on the King James Bible
  ratchet train --model d4 --train-data 'data/train_*.h5' --val-data 'data/val_*.h5' \
      --seq-len 128 --batch-size 8 --steps 300 --lr 2e-3 --sample-tokens 200

  # GPT-2 124M from an llm.c checkpoint, 8 micro-batches of 4x64 per step
  ratchet train --init-from gpt2_124M.bin --train-data 'fineweb/train_*.h5' \
      --batch-size 4 --seq-len 64 --total-batch-tokens 2048 --steps 1000

  # fine-tune a Hugging Face Llama (SmolLM-135M's directory), export it back for transformers
  ratchet train --init-from SmolLM-135M/ --train-data 'data/train_*.h5' --seq-len 256 \
      --steps 200 --lr 1e-4 --export-hf smollm-tuned/ --export-dtype bf16

  # the same settings from an INI file (keys are the long option names)
  ratchet train --config run.ini --steps 50      # command line wins over the file

  # data parallel on 4 ranks (2 micro-batches of 4x64 each per step), ZeRO-1
  mpirun -np 4 ratchet train --config run.ini --batch-size 4 --seq-len 64 \
      --total-batch-tokens 2048 --zero 1      # or: srun -n 4 --mpi=pmix ratchet train ...

  # a weighted mixture: 70% of the rows from web, 30% from books (in run.ini: two
  # 'train-data = ...' lines, or a [train-data] section at the end of the file with
  # the lines 'web/*.h5 = 0.7' and 'books/*.h5 = 0.3'); stop when a source has no
  # unseen window left
  ratchet train --config run.ini --train-data 'web/*.h5:0.7' --train-data 'books/*.h5:0.3' \
      --on-source-exhausted stop

  # preemptible: save every 200 steps and on SIGUSR1/SIGTERM, resume by rerunning
  ratchet train --config run.ini --ckpt-dir ckpt/ --ckpt-every-steps 200

  # a budgeted run with a cost ledger and early stopping, for `ratchet report`
  ratchet train --config run.ini --run-dir runs/a --price-per-device-hour 2.5 \
      --max-cost 40 --eval-every 200 --early-stop-patience 5

  # HellaSwag and a held-out set scored at each evaluation; stop on HellaSwag accuracy
  ratchet train --config run.ini --run-dir runs/b --eval-every 200 \
      --eval-task hellaswag=hellaswag_val.jsonl --eval-data books='books/val_*.h5' \
      --early-stop-metric hellaswag/acc_norm --early-stop-patience 5

exit codes: 0 done (or stopped early by --early-stop-patience, or by --on-source-exhausted
stop); 1 failed run; 2 bad input;
75 stopped early and saved (signal or time limit): run the same command again to resume
(slurm/train.sbatch requeues); 76 a budget was reached and saved: do not requeue
)";

po::options_description make_options(TrainOptions& o, std::string& config_path,
                                     std::string& schedule, std::string& batch,
                                     std::string& ckpt_every) {
  po::options_description model("model");
  model.add_options()
    ("model", po::value(&o.model)->default_value(o.model),
     "preset: GPT-2 dN (N layers, N heads, 64N channels: d6, d12 = GPT-2 124M, d24, d36, d48); "
     "Llama lN (64N channels, N heads, N/2 KV heads, SwiGLU 8/3 C), smollm-135m, llama3.2-1b, "
     "llama3.1-8b; the published qwen2.5-0.5b, qwen3-0.6b, qwen3-1.7b, qwen3-8b, olmo2-1b, smollm3-3b, "
     "mistral-7b, gemma3-270m, gemma3-1b; "
     "or 'custom' with --layers/--heads/--channels (and --arch)")
    ("arch", po::value(&o.arch),
     "gpt2 | llama (default: the preset's; gpt2 for custom). llama: RMSNorm, RoPE, SwiGLU, "
     "grouped-query attention, no biases")
    ("kv-heads", po::value(&o.kv_heads), "llama: KV heads, dividing --heads (1 = MQA)")
    ("ffn-hidden", po::value(&o.ffn_hidden), "llama: SwiGLU hidden size")
    ("untied", po::bool_switch(&o.untied), "llama: a separate lm_head (untied embeddings)")
    ("rope-theta", po::value(&o.rope_theta), "llama: RoPE base theta")
    ("norm-eps", po::value(&o.norm_eps), "llama: RMSNorm epsilon")
    ("family", po::value(&o.family),
     "llama: the options of a 2026 family on this shape: qwen2 (q/k/v bias), qwen3 (per-head "
     "q/k norm), olmo2 (post norms, full-width q/k norm), smollm3 (NoPE every 4th layer), "
     "mistral (sliding window), gemma3 (sandwich (1+w) norms, GeGLU, embedding scale, 5:1 "
     "sliding:full layers); docs/model-families.md")
    ("head-dim", po::value(&o.head_dim), "llama: head size, if not channels / heads (Qwen3, Gemma 3)")
    ("sliding-window", po::value(&o.sliding_window),
     "--family mistral or gemma3: the sliding window in tokens")
    ("num-experts", po::value(&o.num_experts),
     "--family qwen3_moe, qwen2_moe, olmoe or mixtral: experts per MoE layer (docs/moe.md)")
    ("experts-per-tok", po::value(&o.experts_per_tok), "MoE: experts each token goes to (top k)")
    ("moe-ffn-hidden", po::value(&o.moe_ffn_hidden), "MoE: each expert's SwiGLU hidden size")
    ("moe-scoring", po::value(&o.moe_scoring),
     "MoE: router scores, softmax (default) or sigmoid (DeepSeek-V3's scoring_func; cpu backend)")
    ("routed-scaling-factor", po::value(&o.routed_scaling_factor),
     "MoE: the routing weights times this (DeepSeek-V3's routed_scaling_factor; default 1)")
    ("n-shared-experts", po::value(&o.n_shared_experts),
     "MoE: shared experts per MoE layer, a SwiGLU of --moe-ffn-hidden x N on every token "
     "(DeepSeek-V3's n_shared_experts; default: the model's)")
    ("shared-expert-ffn", po::value(&o.shared_expert_ffn),
     "MoE: --family qwen2_moe's shared expert, a SwiGLU of this width on every token scaled by "
     "sigmoid(x . shared_expert_gate) (Qwen2-MoE's shared_expert_intermediate_size; default: the model's)")
    ("moe-n-group", po::value(&o.moe_n_group),
     "MoE: DeepSeek-V3's group-limited selection: the experts in this many groups (n_group; "
     "default 1, no groups)")
    ("moe-topk-group", po::value(&o.moe_topk_group),
     "MoE: with --moe-n-group, each token's top k among this many best groups (topk_group)")
    ("router-aux-loss-coef", po::value(&o.router_aux_loss_coef),
     "MoE: the load-balancing loss's weight (default: the model's router_aux_loss_coef)")
    ("moe-bias-update-rate", po::value(&o.moe_bias_update_rate),
     "MoE: route with DeepSeek-V3's selection bias (e_score_correction_bias), updated after each "
     "optimizer step from the step's global expert loads at this rate (0: none)")
    ("layers", po::value(&o.layers), "number of transformer blocks (overrides the preset)")
    ("heads", po::value(&o.heads), "attention heads (overrides the preset)")
    ("channels", po::value(&o.channels), "embedding width (overrides the preset)")
    ("vocab-size", po::value(&o.vocab_size), "vocabulary size (default: the shards' vocab_size)")
    ("max-seq-len", po::value(&o.max_seq_len)->default_value(o.max_seq_len),
     "positional embedding rows (maximum --seq-len)")
    ("init-from", po::value(&o.init_from),
     "start from a checkpoint, which sets the model (a model flag above given with it must agree): "
     "an llm.c GPT-2 .bin, or a "
     "Hugging Face Llama directory (config.json + model.safetensors or shards with "
     "model.safetensors.index.json) or FILE.safetensors with config.json beside it; its "
     "tokenizer.json, if any, must be the one the shards were made with")
    ("allow-tokenizer-mismatch", po::bool_switch(&o.allow_tokenizer_mismatch),
     "train although --init-from's tokenizer.json is not the shards' (its digest differs)")
    ("seed", po::value(&o.seed)->default_value(o.seed), "random init and data order seed");

  po::options_description data("data and batch");
  data.add_options()
    ("train-data", po::value(&o.train_data_specs),
     "GLOB[:WEIGHT] of training shards (from `ratchet shard`); repeat it for a weighted mixture "
     "('web/*.h5:0.7' and 'books/*.h5:0.3'; only a trailing :NUMBER is a weight; in an INI "
     "file, one 'train-data = ...' line per source, or a [train-data] section of 'GLOB = WEIGHT' "
     "lines at its end; given here, it replaces the file's sources)")
    ("on-source-exhausted", po::value(&o.on_source_exhausted)->default_value(o.on_source_exhausted),
     "when a --train-data source has drawn every window of its epoch: wrap (its next epoch, "
     "reshuffled) or stop (save, final evaluation and --export, exit 0, naming the source)")
    ("val-data", po::value(&o.val_data), "glob of validation shards")
    ("no-shuffle", po::bool_switch(), "read training windows in order instead of shuffled")
    ("batch-size,B", po::value(&batch)->default_value(std::to_string(o.batch_size)),
     "micro-batch rows B, or 'auto': the largest that fits in memory (needs "
     "--total-batch-tokens; accumulation keeps the total)")
    ("memory-budget-mb", po::value(&o.memory_budget_mb),
     "memory --batch-size auto may use (default: 80% of MemAvailable)")
    ("seq-len,T", po::value(&o.seq_len)->default_value(o.seq_len), "sequence length T")
    ("recompute", po::value(&o.recompute)->default_value(o.recompute),
     "activations recomputed in backward instead of kept: none | gelu | gelu+ln | blocks | "
     "blocks:k (every k-th layer); same gradients, less memory (see `ratchet plan`)")
    ("total-batch-tokens", po::value(&o.total_batch_tokens),
     "tokens per optimizer step, a multiple of B*T*ranks (default B*T*ranks: no accumulation)")
    ("steps", po::value(&o.steps)->default_value(o.steps), "optimizer steps");
  data.add_options()
    ("schedule-steps", po::value(&o.schedule_steps),
     "the LR schedule spans this many steps (default --steps); a run stopped earlier and "
     "resumed with a larger --steps equals one trained straight (sweeps' promotions)");

  po::options_description optim("optimizer");
  optim.add_options()
    ("lr", po::value(&o.lr)->default_value(o.lr, default_text(o.lr)), "peak learning rate")
    ("warmup-steps", po::value(&o.warmup_steps)->default_value(o.warmup_steps),
     "linear warmup steps")
    ("lr-schedule", po::value(&schedule)->default_value(o.lr_schedule),
     "after warmup: cosine | linear | constant")
    ("final-lr-fraction", po::value(&o.final_lr_fraction)->default_value(o.final_lr_fraction, default_text(o.final_lr_fraction)),
     "cosine/linear decay ends at lr x this")
    ("weight-decay", po::value(&o.weight_decay)->default_value(o.weight_decay, default_text(o.weight_decay)),
     "AdamW decoupled weight decay (2-D weights only)")
    ("grad-clip", po::value(&o.grad_clip)->default_value(o.grad_clip, default_text(o.grad_clip)),
     "clip the global gradient norm to this (0: off)")
    ("beta1", po::value(&o.beta1)->default_value(o.beta1, default_text(o.beta1)), "AdamW beta1")
    ("beta2", po::value(&o.beta2)->default_value(o.beta2, default_text(o.beta2)), "AdamW beta2")
    ("adam-eps", po::value(&o.adam_eps)->default_value(o.adam_eps, default_text(o.adam_eps)), "AdamW epsilon");

  po::options_description eval("evaluation, samples, output");
  eval.add_options()
    ("eval-every", po::value(&o.eval_every)->default_value(o.eval_every),
     "validate every N steps (0: only at the end)")
    ("eval-batches", po::value(&o.eval_batches)->default_value(o.eval_batches),
     "validation batches per evaluation (also per --eval-data set)")
    ("eval-task", po::value(&o.eval_tasks)->composing(),
     "NAME=FILE: a multiple-choice task (HellaSwag jsonl, llm.c's hellaswag .bin, or jsonl of "
     "context/choices/label) scored at each evaluation; logs NAME/acc, NAME/acc_norm, "
     "NAME/acc_token_mean (repeatable)")
    ("eval-data", po::value(&o.eval_data)->composing(),
     "NAME=GLOB: shards whose mean loss is logged at each evaluation as data/NAME/loss and "
     "data/NAME/ppl (repeatable)")
    ("eval-task-examples", po::value(&o.eval_task_examples)->default_value(o.eval_task_examples),
     "score the first N examples of each --eval-task (0: all)")
    ("sample-every", po::value(&o.sample_every)->default_value(o.sample_every),
     "print a generated sample every N steps (0: only at the end)")
    ("sample-tokens", po::value(&o.sample_tokens)->default_value(o.sample_tokens),
     "tokens per sample (0: no samples)")
    ("temperature", po::value(&o.temperature)->default_value(o.temperature, default_text(o.temperature)),
     "sampling temperature (0: greedy)")
    ("threads", po::value(&o.threads)->default_value(o.threads),
     "CPU threads per rank (0: the node's cores / ranks on the node)")
    ("device", po::value(&o.device)->default_value(o.device),
     "cpu, cuda (BF16 on a GPU), auto (cuda when a GPU is usable, else cpu), or simt (the "
     "cuda backend run on the CPU: slow, for debugging; in `ratchet-simt`)")
    ("peak-tflops", po::value(&o.peak_tflops)->default_value(o.peak_tflops, default_text(o.peak_tflops)),
     "device peak TFLOP/s for MFU (0: the cuda backend's table: A100 312, H100/H200 989)")
    ("storage", po::value(&o.storage)->default_value(o.storage),
     "cuda/simt storage of parameters, gradients, activations: bf16 (FP32 master weights) or "
     "f32 (the cpu backend is always f32)")
    ("tf32", po::bool_switch(&o.tf32),
     "--storage f32 on a GPU: run the GEMMs on TF32 tensor cores (10-bit mantissa inputs, "
     "FP32 accumulation) instead of exact FP32; off by default")
    ("attention", po::value(&o.attention)->default_value(o.attention),
     "auto (cudnn on an sm80+ GPU with BF16 storage and a head size cuDNN takes, else flash; "
     "the run's first lines say which and why), flash (FlashAttention-2 kernels, keeps "
     "(B,NH,T) statistics), cudnn (cuDNN's fused attention, BF16, --device cuda on a GPU "
     "only), or materialized (keeps the (B,NH,T,T) probabilities); the cpu backend always "
     "runs its blocked flash-style attention")
    ("deterministic", po::value<std::string>()->default_value("on"),
     "on: the same command gives the same weights, and a resume equals a straight run (cuDNN "
     "attention takes its deterministic backward); off: cuDNN's faster backward that "
     "accumulates dQ atomically (recorded in checkpoints; a resume then says it is not "
     "bit-identical)")
    ("zero", po::value<std::string>()->default_value("0"),
     "data parallel: 0 = all-reduce gradients; 1 = ZeRO-1, each rank keeps and updates 1/N of "
     "the AdamW state (reduce-scatter, all-gather); 2 = ZeRO-2, also only 1/N of the summed "
     "gradient: each block's gradient reduce-scattered during the backward into a reused "
     "one-block buffer; 3 = ZeRO-3, also only 1/N of the parameters: each block's parameters "
     "all-gathered before its forward and its backward (the next block prefetched); auto = the "
     "lowest of 0, 1, 2, 3 whose step fits the memory (says why)")
    ("reshard-after-forward", po::value<std::string>()->default_value("on"),
     "--zero 3: on = free each block's gathered parameters after its forward and gather them "
     "again for its backward (least memory); off = keep every block gathered from the forward "
     "to the backward (ZeRO-2's parameter memory, one gather per step saved)")
    ("shard-group", po::value(&o.shard_group),
     "N | node: hybrid sharding, ZeRO-k inside groups of N ranks (node: the ranks of a host), "
     "the gradient shards all-reduced across groups (default: the world, plain ZeRO-k; "
     "1 = ZeRO-0)")
    ("expert-parallel", po::value(&o.expert_parallel)->default_value(o.expert_parallel),
     "N: a Mixture-of-Experts model's experts sharded over groups of N consecutive ranks, "
     "rows exchanged all-to-all (N divides the world size and num_experts; cpu and cuda "
     "backends; at --zero 0 each rank holds its own E/N experts only, at --zero 1-3 every "
     "expert's weights: docs/moe.md)")
    ("moe-ep-capacity", po::value(&o.moe_ep_capacity)->default_value(o.moe_ep_capacity),
     "F >= 1: with --expert-parallel, each MoE layer's buffers for the rows a rank receives are "
     "reserved for ceil(F*N*k) rows (N tokens per rank, k experts per token; at most the P*N*k "
     "of the worst case); a step whose routing sends more grows them (dropless) and logs it")
    ("overlap-comm", po::value<std::string>()->default_value("on"),
     "data parallel: on = reduce each layer's gradients while the backward of the layers below "
     "runs (--zero 0: all-reduce; --zero 1 and 2: reduce-scatter into bucket-aligned shards); "
     "off = after the backward (--zero 1: one flat reduce-scatter)")
    ("log-jsonl", po::value(&o.log_jsonl), "write one JSON object per step/evaluation here")
    ("export", po::value(&o.export_path), "write an llm.c fp32 GPT-2 checkpoint at the end")
    ("export-hf", po::value(&o.export_hf),
     "write a Hugging Face Llama checkpoint (config.json + model.safetensors) into this directory "
     "at the end (and on a budget or early stop), with the shards' tokenizer files "
     "(tokenizer.json, tokenizer_config.json) when they came from a tokenizer.json")
    ("export-dtype", po::value(&o.export_dtype)->default_value(o.export_dtype),
     "--export-hf tensors: f32 (exact) or bf16 (half the size)")
    ("overwrite", po::bool_switch(&o.overwrite), "--export-hf may replace an earlier export's files")
    ("profile", po::bool_switch(&o.profile), "print a per-op time table at the end")
    ("quiet,q", po::bool_switch(&o.quiet), "no per-step lines");

  po::options_description ckpt("checkpoints and preemption");
  ckpt.add_options()
    ("ckpt-dir", po::value(&o.ckpt_dir), "checkpoint directory (resumed from automatically)")
    ("ckpt-every-steps", po::value(&o.ckpt_every_steps)->default_value(o.ckpt_every_steps),
     "save every N steps (0: off)")
    ("ckpt-every-minutes", po::value(&o.ckpt_every_minutes)->default_value(o.ckpt_every_minutes, default_text(o.ckpt_every_minutes)),
     "save every M minutes of wall time (0: off)")
    ("keep-last", po::value(&o.keep_last)->default_value(o.keep_last),
     "keep the newest N checkpoints (plus the best and --keep-every)")
    ("keep-every", po::value(&o.keep_every)->default_value(o.keep_every),
     "also keep checkpoints at multiples of this step (0: none)")
    ("resume", po::value(&o.resume)->default_value(o.resume),
     "auto (newest valid checkpoint in --ckpt-dir, if any) | never | PATH of a checkpoint")
    ("preempt-signal", po::value(&o.preempt_signal)->default_value(o.preempt_signal),
     "signal that means 'save and exit 75' (SIGTERM always does)")
    ("time-limit", po::value(&o.time_limit),
     "stop (save, exit 75) before this much wall time: seconds or [D-]HH:MM:SS; default: the "
     "Slurm job's limit; 'none' to ignore it")
    ("stop-margin", po::value(&o.stop_margin)->default_value(o.stop_margin, default_text(o.stop_margin)),
     "seconds kept free before the time limit, beyond one step and one save")
    ("hang-timeout", po::value(&o.hang_timeout)->default_value(o.hang_timeout, default_text(o.hang_timeout)),
     "hang watchdog, seconds (0: off): a step running longer than max(T, 10 x the slowest step) "
     "or a load, data wait, save or evaluation longer than max(5T, 10 x the slowest of its kind) "
     "(the first of each kind: 5T), or a collective waiting as long, writes RUN_DIR/flight/"
     "rank_R.json and ends the job with exit 75 (requeue); `ratchet doctor RUN_DIR` reads the "
     "records (docs/resilience.md)")
    ("straggler-every", po::value(&o.straggler_every)->default_value(o.straggler_every),
     "straggler check every N steps (0: off; one rank: none): the ranks share their own time per "
     "step, less the time blocked in collectives (docs/resilience.md)")
    ("straggler-threshold", po::value(&o.straggler_threshold)->default_value(o.straggler_threshold, default_text(o.straggler_threshold)),
     "a rank this many times slower than the median (and 50 ms a step slower) is slow in a window")
    ("straggler-windows", po::value(&o.straggler_windows)->default_value(o.straggler_windows),
     "slow windows in a row that name a rank a straggler (log, --log-jsonl, RUN_DIR/suspect_nodes.jsonl)")
    ("on-straggler", po::value(&o.on_straggler)->default_value(o.on_straggler),
     "warn: name it only; requeue: also save and exit 75, so the Slurm wrapper requeues without "
     "its node");

  ckpt.add_options()
    ("ckpt-every", po::value(&ckpt_every),
     "'auto': checkpoint interval from the measured save time and "
     "--expected-preemptions-per-hour (Young/Daly: sqrt(2 x save x MTBF))")
    ("expected-preemptions-per-hour",
     po::value(&o.expected_preemptions_per_hour)->default_value(o.expected_preemptions_per_hour, default_text(o.expected_preemptions_per_hour)),
     "for --ckpt-every auto")
    ("ckpt-async", po::bool_switch(&o.ckpt_async),
     "periodic and best saves: the step loop stops only to copy the shards to host memory, "
     "a background thread writes them while training goes on (stops and the final save wait)");

  po::options_description cost("cost and guardrails");
  cost.add_options()
    ("run-dir", po::value(&o.run_dir),
     "run directory: RUN_DIR/ckpt, RUN_DIR/train.jsonl and RUN_DIR/ledger.json by default "
     "(see `ratchet report`)")
    ("price-per-device-hour", po::value(&o.price_per_device_hour),
     "price of one device (GPU, or CPU node) per hour, for the ledger's cost")
    ("max-device-hours", po::value(&o.max_device_hours),
     "budget: stop (save, exit 76) when the device-hours of all attempts reach this")
    ("max-cost", po::value(&o.max_cost), "budget: stop when the cost reaches this")
    ("max-wall-time", po::value(&o.max_wall_time),
     "budget: stop when the wall time of all attempts reaches this (seconds or [D-]HH:MM:SS)")
    ("max-tokens", po::value(&o.max_tokens), "budget: stop when this many tokens are trained")
    ("early-stop-patience", po::value(&o.early_stop_patience),
     "stop after this many evaluations without a val loss improvement (0: off); the best "
     "checkpoint is kept")
    ("early-stop-min-delta", po::value(&o.early_stop_min_delta),
     "an improvement must be larger than this")
    ("early-stop-metric", po::value(&o.early_stop_metric)->default_value(o.early_stop_metric),
     "what early stopping and the best checkpoint follow: val_loss, an --eval-task's "
     "NAME/acc_norm (or acc, acc_token_mean), an --eval-data's data/NAME/loss")
    ("early-stop-direction", po::value(&o.early_stop_direction),
     "min | max (default: the metric's own: losses min, accuracies max)")
    ("tag", po::value(&o.tags)->composing(),
     "key=value label written into the ledger for cost attribution (repeatable; "
     "`ratchet report DIR` sums spend per tag over a directory of runs)");

  po::options_description all("ratchet train options");
  all.add_options()
    ("help,h", "print this help")
    ("config", po::value(&config_path), "INI file of options (keys = long option names)");
  all.add(model).add(data).add(optim).add(eval).add(ckpt).add(cost);
  return all;
}

// --tag key=value checked, plus the Slurm job and account when inside a job.
void add_ledger_tags(TrainOptions& o) {
  for (const std::string& t : o.tags) {
    const auto eq = t.find('=');
    // Before the key=value check: the message must not print the character.
    for (unsigned char c : t)
      if (c < 0x20 || c == 0x7f)
        fail("--tag holds a control character (byte 0x", "0123456789abcdef"[c >> 4],
             "0123456789abcdef"[c & 15], "): tags are written to ledger.json and printed by "
             "`ratchet report --by-tag`; use printable text (e.g. --tag project=llm)");
    if (eq == std::string::npos || eq == 0)
      fail("--tag '", t, "' must be key=value (e.g. --tag project=llm)");
  }
  for (const auto& [key, var] : {std::pair<const char*, const char*>{"slurm_job_id", "SLURM_JOB_ID"},
                                 {"slurm_account", "SLURM_JOB_ACCOUNT"}})
    if (const char* v = std::getenv(var); v && *v) o.tags.push_back(std::string(key) + "=" + v);
}

}  // namespace

std::vector<std::string> train_option_names() {
  TrainOptions o;
  std::string a, b, c, d;
  std::vector<std::string> names;
  const po::options_description desc = make_options(o, a, b, c, d);
  for (const auto& opt : desc.options()) names.push_back(opt->long_name());
  return names;
}

void check_train_config(const std::string& path, const std::string& what) {
  TrainOptions o;
  std::string a, b, c, d;
  const po::options_description desc = make_options(o, a, b, c, d);
  // `what` is "--base PATH" or the path itself: the flag, if any, names the file.
  std::string t = read_small_text_file(path, what == path ? "" : what.substr(0, what.find(' ')));
  if (t.rfind("\xEF\xBB\xBF", 0) == 0) t.erase(0, 3);  // a UTF-8 BOM: `sweep init`'s copy has none
  // Its [train-data] section as `ratchet train --config` reads it (data/mixture_ini.h).
  std::istringstream in(read_train_data_section(t, what, train_option_names()).rest);
  po::variables_map vm;
  try {
    po::store(parse_config_stream(in, desc), vm);
  } catch (const po::error& e) {
    fail(what, ": `ratchet train --config` refuses it: ", e.what());
  }
}

int cmd_train(int argc, char** argv) {
  TrainOptions o;
  std::string config_path, schedule, batch, ckpt_every;
  po::options_description desc = make_options(o, config_path, schedule, batch, ckpt_every);
  po::variables_map vm;
  if (!parse_options(argc, argv, desc, vm, "train")) return kExitUsage;
  if (vm.count("help")) {
    std::cout << "usage: ratchet train [options]\n\nTrains a GPT-2 or Llama-shaped model on HDF5 token shards."
              << "\n\n" << desc << "\n" << kExamples;
    return kExitOk;
  }
  // --config: its [train-data] section (data/mixture_ini.h) is read here, the
  // rest by Boost. --train-data on the command line replaces the file's
  // sources, whichever form they take, as for any option given on both.
  const bool cli_train_data = vm.count("train-data") > 0;
  TrainDataSection ini_sources;
  if (vm.count("config")) {
    config_path = vm["config"].as<std::string>();
    ini_sources = read_train_data_section(read_config_file(config_path), config_path,
                                          train_option_names());
    parse_config_text(ini_sources.rest, config_path, desc, vm, "train");
  }
  po::notify(vm);
  if (cli_train_data && (ini_sources.header_line || ini_sources.key_line) && detect_launch().rank == 0)
    std::printf("note: --train-data on the command line replaces the training sources of %s "
                "(line %d), not added to them\n", config_path.c_str(),
                ini_sources.header_line ? ini_sources.header_line : ini_sources.key_line);
  if (!cli_train_data && ini_sources.header_line) {
    check_train_data_section_globs(ini_sources, config_path);
    o.train_data_specs = ini_sources.specs;
  }
  if (vm.count("total-batch-tokens") && o.total_batch_tokens <= 0)
    fail("--total-batch-tokens must be positive (got ", o.total_batch_tokens,
         "); leave it out for one micro-batch per step");
  // A model flag given as 0 (or below, or NaN) is refused: left to the model
  // code it would silently mean "the preset's".
  const std::pair<const char*, long> counts[] = {{"layers", o.layers},         {"heads", o.heads},
                                                 {"channels", o.channels},     {"kv-heads", o.kv_heads},
                                                 {"ffn-hidden", o.ffn_hidden}, {"vocab-size", o.vocab_size},
                                                 {"head-dim", o.head_dim},     {"sliding-window", o.sliding_window},
                                                 {"num-experts", o.num_experts}, {"experts-per-tok", o.experts_per_tok},
                                                 {"moe-ffn-hidden", o.moe_ffn_hidden},
                                                 {"moe-n-group", o.moe_n_group}, {"moe-topk-group", o.moe_topk_group}};
  for (const auto& [flag, v] : counts)
    if (vm.count(flag) && v < 1) fail("--", flag, " must be at least 1 (got ", v, ")");
  const std::pair<const char*, double> reals[] = {{"rope-theta", o.rope_theta}, {"norm-eps", o.norm_eps}};
  for (const auto& [flag, v] : reals)
    if (vm.count(flag) && !(std::isfinite(v) && v > 0))
      fail("--", flag, " must be a positive finite number (got ", v, ")");
  if (vm.count("routed-scaling-factor") &&
      !(std::isfinite(o.routed_scaling_factor) && o.routed_scaling_factor > 0))
    fail("--routed-scaling-factor must be a positive finite number (got ", o.routed_scaling_factor,
         ")");
  if (vm.count("n-shared-experts") && o.n_shared_experts < 0)
    fail("--n-shared-experts must be >= 0 (got ", o.n_shared_experts, ")");
  if (vm.count("shared-expert-ffn") && o.shared_expert_ffn < 0)
    fail("--shared-expert-ffn must be >= 0 (got ", o.shared_expert_ffn, ")");
  if (vm.count("moe-bias-update-rate") &&
      !(std::isfinite(o.moe_bias_update_rate) && o.moe_bias_update_rate >= 0))
    fail("--moe-bias-update-rate must be a finite number >= 0 (got ", o.moe_bias_update_rate,
         "; 0: no selection bias)");
  if (!(std::isfinite(o.moe_ep_capacity) && o.moe_ep_capacity >= 1))
    fail("--moe-ep-capacity must be a finite number >= 1 (got ", o.moe_ep_capacity,
         "): the received rows reserved per MoE layer, as a multiple of N*k (default 2)");
  if (vm.count("router-aux-loss-coef") &&
      !(std::isfinite(o.router_aux_loss_coef) && o.router_aux_loss_coef >= 0))
    fail("--router-aux-loss-coef must be a finite number >= 0 (got ", o.router_aux_loss_coef, ")");
  o.model_given = !vm["model"].defaulted();
  o.max_seq_len_given = !vm["max-seq-len"].defaulted();
  o.lr_schedule = schedule;
  if (batch == "auto") {
    o.batch_size = 0;
  } else {
    try {
      size_t pos = 0;
      o.batch_size = std::stoi(batch, &pos);
      if (pos != batch.size() || o.batch_size < 1) throw std::invalid_argument(batch);
    } catch (const std::exception&) {
      fail("--batch-size '", batch, "' must be a positive integer or auto");
    }
  }
  if (!ckpt_every.empty() && ckpt_every != "auto")
    fail("--ckpt-every '", ckpt_every, "': only 'auto' is accepted (use --ckpt-every-steps N or "
         "--ckpt-every-minutes M for fixed intervals)");
  o.ckpt_every_auto = ckpt_every == "auto";
  o.shuffle = !vm["no-shuffle"].as<bool>();
  if (!o.train_data_specs.empty())  // weights, duplicates checked; the text identity and logs use
    o.train_data = sources_text(parse_source_specs(o.train_data_specs, "--train-data"));
  parse_on_source_exhausted(o.on_source_exhausted);
  if (o.schedule_steps < 0 || (o.schedule_steps > 0 && o.schedule_steps < o.steps))
    fail("--schedule-steps ", o.schedule_steps, " must be at least --steps ", o.steps,
         " (or 0: the schedule spans --steps)");
  add_ledger_tags(o);
  {
    const std::string d = vm["deterministic"].as<std::string>();
    if (d != "on" && d != "off")
      fail("--deterministic must be on or off (got '", d, "'): on keeps runs bit-identical, off "
           "lets cuDNN's attention backward accumulate dQ atomically (faster, not reproducible)");
    o.deterministic = d == "on";
    check_attention_request(o.attention);
  }
  {
    const std::string z = vm["zero"].as<std::string>();
    o.zero_auto = z == "auto";
    if (!o.zero_auto) {
      if (z.empty() || z.size() > 2 || z.find_first_not_of("0123456789") != std::string::npos)
        fail("--zero must be 0, 1, 2, 3 or auto (got '", z, "')");
      o.zero = std::stoi(z);
    }
    const std::string r = vm["reshard-after-forward"].as<std::string>();
    if (r != "on" && r != "off")
      fail("--reshard-after-forward must be on or off (got '", r, "')");
    o.reshard_after_forward = r == "on";
    o.reshard_given = !vm["reshard-after-forward"].defaulted();
  }
  {
    const std::string ov = vm["overlap-comm"].as<std::string>();
    if (ov != "on" && ov != "off") fail("--overlap-comm must be on or off (got '", ov, "')");
    o.overlap_comm = ov == "on";
  }
  return run_training(o);
}

}  // namespace ratchet
