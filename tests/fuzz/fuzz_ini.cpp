// The INI text ratchet reads back (ckpt/checkpoint.h from_ini: checkpoint
// run identity, settings and counters; the run lock's holder text): any text
// parses, and what it parsed writes back to text that parses to the same map.
#include "ckpt/checkpoint.h"

#include <string>

#include "core/error.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text((const char*)data, size);
  try {
    const auto m = ratchet::from_ini(text);
    bool writable = true;  // to_ini writes "k = v" lines: keys and values of one line
    for (const auto& [k, v] : m)
      if (k.find('\n') != std::string::npos || v.find('\n') != std::string::npos ||
          k.find(" = ") != std::string::npos)
        writable = false;
    if (writable && ratchet::from_ini(ratchet::to_ini(m)) != m) __builtin_trap();
  } catch (const ratchet::Error&) {
  }
  return 0;
}
