// Everything `ratchet train` can be told. Filled by cli/cmd_train.cpp from
// the command line and an optional INI file (--config); defaults here.
#pragma once
#include <limits>
#include <cstdint>
#include <string>
#include <vector>

namespace ratchet {

struct TrainOptions {
  // model
  std::string model = "d6";     // preset dN / lN / smollm-135m / llama3.2-1b, or "custom"
  std::string arch;             // "" (the preset's; gpt2 for custom) | gpt2 | llama
  int layers = 0, heads = 0, channels = 0;  // 0: from the preset
  int kv_heads = 0, ffn_hidden = 0;  // llama: 0 from the preset
  bool untied = false;               // llama: a separate lm_head
  float rope_theta = 0, norm_eps = 0;  // llama: 0 from the preset
  std::string family;                  // --family: a family's options on the shape ("" none)
  int head_dim = 0, sliding_window = 0;  // --head-dim, --sliding-window (0: unset)
  // --num-experts, --experts-per-tok, --moe-ffn-hidden (0: unset; MoE families)
  int num_experts = 0, experts_per_tok = 0, moe_ffn_hidden = 0;
  // --moe-scoring softmax|sigmoid, --routed-scaling-factor ("" / 0: the model's)
  std::string moe_scoring;
  float routed_scaling_factor = 0;
  int n_shared_experts = 0;  // --n-shared-experts N: shared experts per MoE layer (0: the model's)
  int shared_expert_ffn = 0;  // --shared-expert-ffn N: Qwen2-MoE's gated shared expert's width (0: the model's)
  // --moe-n-group, --moe-topk-group: DeepSeek-V3's group-limited selection (0: the model's)
  int moe_n_group = 0, moe_topk_group = 0;
  // --router-aux-loss-coef: the MoE aux loss's weight; NaN: the config's
  float router_aux_loss_coef = std::numeric_limits<float>::quiet_NaN();
  // --moe-bias-update-rate R: DeepSeek-V3's selection bias, updated after
  // each optimizer step at rate R (0: no bias)
  float moe_bias_update_rate = 0;
  bool model_given = false;  // --model given (not its default): checked against --init-from
  int vocab_size = 0;           // 0: from the training shards' vocab_size
  int max_seq_len = 1024;
  bool max_seq_len_given = false;  // --max-seq-len given: honoured (or refused) with --init-from
  std::string init_from;        // llm.c GPT-2 .bin, or a Hugging Face Llama directory or
                                // .safetensors file; overrides the shape flags
  bool allow_tokenizer_mismatch = false;  // --init-from's tokenizer.json may differ from the shards'
  uint64_t seed = 1337;

  // data
  std::string train_data, val_data;  // globs of HDF5 token shards; train_data: the sources'
                                     // text (data/mixture.h sources_text) for identity, logs
  std::vector<std::string> train_data_specs;  // --train-data GLOB[:WEIGHT], repeatable (mixture.h)
  std::string on_source_exhausted = "wrap";   // wrap | stop (data/mixture.h)
  bool shuffle = true;

  // batch
  int batch_size = 4;           // B: micro-batch rows; 0 = auto (largest that fits in memory)
  double memory_budget_mb = 0;  // for --batch-size auto: 0 = 80% of MemAvailable
  int seq_len = 64;             // T
  std::string recompute = "none";  // none | gelu | gelu+ln | blocks | blocks:k (model/recompute.h)
  long total_batch_tokens = 0;  // 0: B*T (no accumulation)
  int steps = 100;
  int schedule_steps = 0;       // the LR schedule spans this many steps (0: --steps); sweeps
                                // stop a trial at a rung while its cosine decays over R

  // optimizer
  float lr = 3e-4f;
  int warmup_steps = 0;
  std::string lr_schedule = "cosine";
  float final_lr_fraction = 0.1f;
  float weight_decay = 0.1f;
  float grad_clip = 1.0f;
  float beta1 = 0.9f, beta2 = 0.95f, adam_eps = 1e-8f;

  // evaluation and sampling
  int eval_every = 0;           // 0: only at the end
  int eval_batches = 20;
  int sample_every = 0;         // 0: only at the end
  int sample_tokens = 0;        // 0: no samples
  float temperature = 1.0f;
  std::vector<std::string> eval_tasks;  // --eval-task NAME=FILE (train/eval_suite.h)
  std::vector<std::string> eval_data;   // --eval-data NAME=GLOB
  int eval_task_examples = 0;           // the first N examples of each task (0: all)

  // machine and output
  int threads = 0;              // 0: the node's cores / the ranks on this node
  std::string device = "auto";  // cpu | cuda | auto (cuda if a GPU is usable) | simt
  double peak_tflops = 0;       // device peak for MFU; 0: the backend's table (cuda), none (cpu)

  std::string storage = "bf16";  // cuda/simt storage dtype: bf16 | f32 (cpu: always f32)
  std::string attention = "auto";  // auto | flash | cudnn | materialized (backend/attention_choice.h)
  bool deterministic = true;  // --deterministic on|off: cuDNN attention's deterministic backward

  // data parallel (ranks from mpirun / srun; see distributed/communicator.h)
  int zero = 0;                 // ZeRO stage: 0 = all-reduce gradients, 1 = shard AdamW state,
                                // 2 = and the gradient, 3 = and the parameters (distributed/strategy.h)
  bool zero_auto = false;       // --zero auto: the trainer picks 0, 1 or 2 by memory (zero stays 0 until then)
  std::string shard_group;      // --shard-group N|node: ZeRO-k in groups (distributed/shard_groups.h); "" = the world
  int expert_parallel = 1;      // --expert-parallel N: MoE experts sharded over N ranks (distributed/expert_parallel.h)
  double moe_ep_capacity = 2.0; // --moe-ep-capacity F: received rows reserved per MoE layer, ceil(F·N·k) (docs/moe.md)
  bool tf32 = false;             // --storage f32 GEMMs on TF32 tensor cores
  bool reshard_after_forward = true;  // --zero 3: free each block's gathered parameters after its
                                      // forward (gathered again for the backward); false keeps them
  bool reshard_given = false;         // --reshard-after-forward was on the command line
  bool overlap_comm = true;     // stage 0: all-reduce each layer's gradients during backward
  std::string log_jsonl;
  std::string export_path;      // llm.c fp32 checkpoint written at the end
  std::string export_hf;        // Hugging Face directory (config.json + safetensors) written at the end
  std::string export_dtype = "f32";  // --export-hf tensors: f32 | bf16
  bool overwrite = false;       // --export-hf may replace an earlier export's files
  bool profile = false;         // per-op table after the run
  bool quiet = false;           // no per-step lines (summary only)

  // checkpoints and the stop protocol
  std::string ckpt_dir;         // "" : no checkpoints
  int ckpt_every_steps = 0;     // 0: off
  double ckpt_every_minutes = 0;  // 0: off
  int keep_last = 3;
  int keep_every = 0;
  std::string resume = "auto";  // auto | never | PATH of a checkpoint directory
  std::string preempt_signal = "USR1";
  std::string time_limit;       // "" : from Slurm inside a job; "none"; seconds or HH:MM:SS
  double stop_margin = 10;      // seconds kept free before the time limit
  double hang_timeout = 120;    // the hang watchdog's T (train/watchdog.h); 0 = off
  // Straggler detection (train/straggler.h): every N steps (0 = off), a rank
  // slower than threshold x the median for `windows` windows in a row.
  int straggler_every = 50;
  double straggler_threshold = 1.3;
  int straggler_windows = 3;
  std::string on_straggler = "warn";  // warn | requeue
  bool ckpt_every_auto = false; // Young/Daly interval from the save time and preemption rate
  bool ckpt_async = false;      // periodic saves written in the background (train/checkpoint_writer.h)
  double expected_preemptions_per_hour = 1.0;

  // cost and guardrails
  std::string run_dir;          // defaults: RUN_DIR/ckpt, RUN_DIR/train.jsonl, RUN_DIR/ledger.json
  double price_per_device_hour = 0;
  double max_device_hours = 0;  // budgets: 0 = none; reaching one saves and exits 76
  double max_cost = 0;
  std::string max_wall_time;    // summed over requeues: seconds or [D-]HH:MM:SS
  double max_tokens = 0;
  int early_stop_patience = 0;  // evaluations without improvement; 0 = off
  double early_stop_min_delta = 0;
  std::string early_stop_metric = "val_loss";  // any metric the run logs (report/objective.h)
  std::string early_stop_direction;            // min | max; "": the metric's own
  std::vector<std::string> tags;  // "key=value" labels written into the ledger (sweep, trial, ...)
};

}  // namespace ratchet
