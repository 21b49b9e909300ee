// safetensors files (interop/safetensors.h): any header (lengths past the
// end, bad JSON, offsets that overlap or overflow, shapes whose product
// overflows) must fail with ratchet::Error; an accepted file must read every
// tensor within its bytes.
#include "interop/safetensors.h"

#include <vector>

#include "core/error.h"
#include "fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = ratchet::fuzz::write_scratch("model.safetensors", data, size);
  try {
    ratchet::SafetensorsFile f(path);
    std::vector<float> buf;
    for (const auto& t : f.tensors()) {
      if ((t.end - t.begin) / ratchet::st_dtype_bytes(t.dtype) != (uint64_t)t.numel()) __builtin_trap();
      buf.resize((size_t)t.numel());
      f.read_f32(t, buf.data());
    }
  } catch (const ratchet::Error&) {
  }
  return 0;
}
