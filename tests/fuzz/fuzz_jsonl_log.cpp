// The training log as `ratchet report` reads it (report/report.h): one JSON
// object per line, a torn last line skipped, anything else a clear Error.
#include "report/report.h"

#include "core/error.h"
#include "fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = ratchet::fuzz::write_scratch("train.jsonl", data, size);
  try {
    (void)ratchet::report::read_run_log(path);
  } catch (const ratchet::Error&) {
  }
  return 0;
}
