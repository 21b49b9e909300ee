// llm.c token files (data/llmc_tokens.h): any bytes either read as exactly the
// tokens the header announces, or fail with ratchet::Error.
#if __has_include("data/llmc_tokens.h")
#include "data/llmc_tokens.h"
#else
#include "data_tools/llmc_tokens.h"
#endif

#include "core/error.h"
#include "fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = ratchet::fuzz::write_scratch("tokens.bin", data, size);
  (void)ratchet::is_llmc_tokens_file(path);
  try {
    const auto tokens = ratchet::read_llmc_tokens(path);
    // Read: the file is exactly the header plus 2 bytes per token.
    if (size != ratchet::kLlmcHeaderInts * 4 + 2 * tokens.size()) __builtin_trap();
  } catch (const ratchet::Error&) {
  }
  return 0;
}
