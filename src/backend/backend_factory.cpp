// The backend factory: cpu always; cuda and simt when registered. See backend.h.
#include <cstdlib>
#include <map>

#include "backend/backend.h"
#include "core/error.h"

namespace ratchet {

namespace {
struct Entry {
  BackendMaker make;
  BackendProbe available;
  BackendDescribe describe;
};
std::map<std::string, Entry>& registry() {
  static std::map<std::string, Entry> r;
  return r;
}

std::string visible_devices() {
  const char* v = std::getenv("CUDA_VISIBLE_DEVICES");
  return v ? std::string("CUDA_VISIBLE_DEVICES='") + v + "'" : "CUDA_VISIBLE_DEVICES is unset";
}
}  // namespace

void register_backend(const std::string& device, BackendMaker make, BackendProbe available,
                      BackendDescribe describe) {
  registry()[device] = Entry{make, available, describe};
}

namespace {
void add_line(std::string* note, const std::string& line) {
  if (!note || line.empty()) return;
  if (!note->empty()) *note += "\n";
  *note += line;
}

// --attention auto resolved for this device (attention_choice.h); the note
// says what was picked and why.
BackendOptions resolve_attention(BackendOptions o, const AttentionDevice& d, std::string* note) {
  const size_t sb = o.storage == "f32" || o.storage == "fp32" || d.kind == AttentionDevice::kCpu
                        ? 4 : 2;
  const AttentionChoice c =
      choose_attention(o.attention_auto ? "auto" : attention_name(o.attention), d, sb, o.heads);
  o.attention = c.impl;
  o.attention_auto = false;
  add_line(note, c.note);
  if (!c.warning.empty()) add_line(note, "warning: " + c.warning);
  return o;
}

AttentionDevice describe(const Entry& e, AttentionDevice::Kind kind) {
  if (e.describe) return e.describe();
  AttentionDevice d;
  d.kind = kind;
  return d;
}

// The cpu backend has one attention (blocked, the flash scheme).
std::unique_ptr<Backend> cpu_backend(BackendOptions o, std::string* note) {
  o = resolve_attention(o, AttentionDevice{}, note);
  if (o.attention != AttentionImpl::flash)
    fail("--attention ", attention_name(o.attention), ": the cpu backend has one attention, "
         "blocked with an online softmax (flash); use --attention flash, or --device cuda/simt "
         "for ", attention_name(o.attention));
  return make_cpu_backend(o.threads);
}
}  // namespace

std::unique_ptr<Backend> make_backend(const BackendOptions& o, std::string* note) {
  const auto& r = registry();
  if (note) note->clear();
  // Checked on every device: the cpu backend ignores it (always FP32), but a
  // typo would otherwise pass silently and fail only when the job moves to a GPU.
  if (!o.storage.empty() && o.storage != "bf16" && o.storage != "f32" && o.storage != "fp32")
    fail("--storage '", o.storage, "' is not a storage type: use bf16 or f32");
  if (o.device == "cpu") return cpu_backend(o, note);
  if (o.device == "auto") {
    auto it = r.find("cuda");
    std::string why = "this ratchet was built without the CUDA backend";
    if (it != r.end() && it->second.available(&why))
      return it->second.make(resolve_attention(o, describe(it->second, AttentionDevice::kCuda),
                                               note));
    add_line(note, "device auto: no usable CUDA device (" + why + "); using the CPU backend");
    return cpu_backend(o, note);
  }
  if (o.device == "cuda") {
    auto it = r.find("cuda");
    if (it == r.end())
      fail("--device cuda: this ratchet was built without the CUDA backend (CUDA toolkit not "
           "found at configure time, or configured with -DRATCHET_DEVICE_SIMT=ON): rebuild with "
           "the toolkit (CUDAToolkit_ROOT), or run on the CPU with --device cpu");
    std::string why;
    const bool usable = it->second.available(&why);
    if (!usable && !o.attention_auto && o.attention == AttentionImpl::cudnn)
      fail("--attention cudnn: cuDNN's fused attention runs on a GPU, and there is no usable "
           "CUDA device (", why, "; ", visible_devices(), "). Use --attention flash (also "
           "--device simt or cpu), or run on a GPU node");
    if (!usable)
      fail("--device cuda: no usable CUDA device (", why, "; ", visible_devices(),
           "). Run on the CPU with --device cpu (or --device auto), or make a GPU visible: "
           "check nvidia-smi, the driver, and CUDA_VISIBLE_DEVICES");
    return it->second.make(resolve_attention(o, describe(it->second, AttentionDevice::kCuda),
                                             note));
  }
  if (o.device == "simt") {
    auto it = r.find("simt");
    if (it == r.end())
      fail("--device simt: this executable does not include the simt-run CUDA backend: run "
           "`ratchet-simt` (built next to `ratchet` when the kernels are), configure with "
           "-DRATCHET_DEVICE_SIMT=ON, or use --device cpu");
    return it->second.make(resolve_attention(o, describe(it->second, AttentionDevice::kSimt),
                                             note));
  }
  fail("--device '", o.device, "' is not one of cpu, cuda, auto, simt");
}

AttentionImpl parse_attention(const std::string& name) {
  for (AttentionImpl a :
       {AttentionImpl::flash, AttentionImpl::cudnn, AttentionImpl::materialized})
    if (name == attention_name(a)) return a;
  fail("--attention '", name, "' is not one of flash, cudnn, materialized");
}

}  // namespace ratchet
