// The model `ratchet eval --init-from PATH` evaluates, from any of:
//   a ratchet checkpoint     CKPT_DIR (its newest valid checkpoint) or one
//                            CKPT_DIR/step_N (state.h5, checksums verified)
//   an llm.c GPT-2 .bin      model/llmc_checkpoint.h
//   a Hugging Face directory interop/hf_checkpoint.h (or FILE.safetensors)
// and the tokenizer it implies: a checkpoint's `tokenizer` setting (written
// by ratchet train), else its training shards' `tokenizer` attribute (the
// run identity names them) when they can still be opened, else the one
// known tokenizer whose vocab is the model's (byte: 257, gpt2: 50257);
// "" when none (the caller asks for --tokenizer).
#pragma once
#include <string>
#include <vector>

#include "model/config.h"

namespace ratchet {

struct ModelSource {
  std::string kind;  // "checkpoint", "llmc" or "hf"
  std::string path;  // what was loaded (the step directory for a CKPT_DIR)
  GPTConfig cfg;
  std::vector<float> params;  // FP32, ParamLayout order
  std::vector<float> moe_bias;  // a checkpoint's MoE selection bias (L,E) (GPT::set_moe_bias); empty: none
  long step = -1;             // a checkpoint's step
  std::string tokenizer;      // implied tokenizer name, "" when unknown
  std::string tokenizer_from; // where it came from, for the log
};

// Errors (ratchet::Error) name `flag` and the path: nothing there, a
// directory that is neither a checkpoint nor a Hugging Face export, no valid
// checkpoint in a CKPT_DIR, and every reader's own complaint.
// Warnings (a corrupt checkpoint skipped) are prefixed "WHO: warning:".
ModelSource load_model_source(const std::string& path, const std::string& flag = "--init-from",
                              const char* who = "eval");

}  // namespace ratchet
