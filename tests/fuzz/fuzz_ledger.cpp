// The cost ledger (train/ledger.h): RUN/ledger.json is read back on every
// resume; a damaged one is ignored (nullopt), never a crash.
#include "train/ledger.h"

#include "core/error.h"
#include "fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = ratchet::fuzz::write_scratch("ledger.json", data, size);
  try {
    if (auto l = ratchet::Ledger::read_json(path)) {
      // Whatever was read must survive the map form a checkpoint stores.
      (void)ratchet::Ledger::from_map(l->to_map());
      (void)l->summary();
    }
  } catch (const ratchet::Error&) {
  }
  return 0;
}
