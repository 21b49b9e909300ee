// llm.c GPT-2 model files (model/llmc_checkpoint.h): a damaged header (sizes
// that overflow, negative counts) must fail with ratchet::Error, never reach
// an allocation the file cannot back.
#include "model/llmc_checkpoint.h"

#include "core/error.h"
#include "fuzz_util.h"
#include "model/param_layout.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = ratchet::fuzz::write_scratch("model.bin", data, size);
  (void)ratchet::llmc_model_file_kind(path);
  try {
    ratchet::GPTConfig cfg;
    const auto params = ratchet::load_llmc_checkpoint(path, &cfg);
    if (params.size() != ratchet::ParamLayout(cfg).total) __builtin_trap();
  } catch (const ratchet::Error&) {
  }
  return 0;
}
