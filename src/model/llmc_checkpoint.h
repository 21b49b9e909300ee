// llm.c GPT-2 checkpoints (train_gpt2.c's model file), import and export.
//
// Layout: 256 int32 header, then every parameter in ParamLayout order.
//   header[0] magic 20240326
//   header[1] version: 3 = fp32 tensors, 5 = bf16 tensors (import only)
//   header[2] max_seq_len   [3] vocab_size   [4] num_layers
//   header[5] num_heads     [6] channels     [7] padded_vocab_size
//   header[8..255] zero
#pragma once
#include <string>
#include <vector>

#include "model/config.h"

namespace ratchet {

constexpr int kLlmcModelMagic = 20240326;
constexpr int kLlmcVersionFp32 = 3;
constexpr int kLlmcVersionBf16 = 5;

// "llm.c GPT-2 model file (version 3, fp32)" when `path` starts with the
// model magic, else "" (for messages about a file given in the wrong place).
std::string llmc_model_file_kind(const std::string& path);

// The header alone, validated (sizes bounded, the file's size matching): the
// config, before anything of the model's size is allocated.
GPTConfig read_llmc_config(const std::string& path);
// Reads and validates a checkpoint; returns its config and FP32 parameters.
// Throws Error naming the file for a wrong magic, version or size, and for a
// non-finite weight (naming the tensor and element).
std::vector<float> load_llmc_checkpoint(const std::string& path, GPTConfig* cfg);
// Writes an fp32 (version 3) checkpoint atomically (temp file + rename).
// Refuses (std::runtime_error: a failed run) non-finite weights.
void save_llmc_checkpoint(const std::string& path, const GPTConfig& cfg,
                          const std::vector<float>& params);

}  // namespace ratchet
