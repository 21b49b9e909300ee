// Checkpoint state files (ckpt/checkpoint.h) with fuzzed root attributes
// (format, version, step, model shape, run identity/settings/counters as INI
// text, optimizer_shards) and tensors: reading either returns a checkpoint
// whose tensors have the model's size, or fails with ratchet::Error.
#include <zlib.h>

#include <filesystem>

#include "ckpt/checkpoint.h"
#include "core/error.h"
#include "fuzz_util.h"
#include "h5_fuzz_writer.h"
#include "model/param_layout.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  FuzzedDataProvider in(data, size);
  const std::string dir = ratchet::fuzz::scratch_dir() + "/ckpt";
  std::filesystem::create_directories(dir);
  H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
  hid_t f = H5Fcreate((dir + "/state.h5").c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
  if (f < 0) return 0;
  if (in.ConsumeBool()) ratchet::fuzz::put_string(f, "format", "ratchet-checkpoint");
  else ratchet::fuzz::put_fuzzed_attr(in, f, "format", 0, 0);
  ratchet::fuzz::put_fuzzed_attr(in, f, "format_version", -1, 3);
  for (const char* a : {"step", "adam_t", "loader_epoch", "loader_position", "best_val_loss",
                        "best_step", "optimizer_shards"})
    ratchet::fuzz::put_fuzzed_attr(in, f, a, -2, 5);
  // A small model shape most of the time, so the tensors can match it.
  int64_t shape[6] = {1, 1, 4, 8, 128, 4};  // layers, heads, channels, vocab, padded, maxT
  const char* names[6] = {"num_layers", "num_heads", "channels", "vocab_size", "padded_vocab",
                          "max_seq_len"};
  for (int i = 0; i < 6; i++) {
    if (in.ConsumeIntegralInRange<int>(0, 3) == 0) {
      ratchet::fuzz::put_fuzzed_attr(in, f, names[i], -4, 300);
    } else {
      ratchet::fuzz::put_scalar(f, names[i], H5T_NATIVE_INT64, &shape[i]);
    }
  }
  for (const char* a : {"run_identity", "run_settings", "counters"}) {
    if (in.ConsumeBool())
      ratchet::fuzz::put_string(f, a, in.ConsumeRandomLengthString(128));
    else
      ratchet::fuzz::put_fuzzed_attr(in, f, a, 0, 0);
  }
  ratchet::GPTConfig c;
  c.num_layers = 1, c.num_heads = 1, c.channels = 4, c.vocab_size = 8, c.padded_vocab = 128,
  c.max_seq_len = 4;
  const size_t P = ratchet::ParamLayout(c).total;
  for (const char* t : {"params", "adam_m", "adam_v"}) {
    if (in.ConsumeBool()) {  // a well-formed tensor with its real crc32
      std::vector<float> v(P);
      for (auto& x : v) x = in.ConsumeFloatingPoint<float>();
      hsize_t dims[1] = {P};
      hid_t space = H5Screate_simple(1, dims, nullptr);
      hid_t d = H5Dcreate2(f, t, H5T_IEEE_F32LE, space, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
      H5Dwrite(d, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, v.data());
      uint64_t crc = crc32(crc32(0L, Z_NULL, 0), (const Bytef*)v.data(), (uInt)(P * 4));
      ratchet::fuzz::put_scalar(d, "crc32", H5T_NATIVE_UINT64, &crc);
      H5Dclose(d);
      H5Sclose(space);
    } else {
      ratchet::fuzz::put_fuzzed_dataset(in, f, t, P, 64);
    }
  }
  H5Fclose(f);

  try {
    (void)ratchet::read_checkpoint_meta(dir);
    const ratchet::Checkpoint ck = ratchet::read_checkpoint(dir);
    const size_t want = ratchet::ParamLayout(ck.meta.model).total;
    if (ck.params.size() != want || ck.adam_m.size() != want || ck.adam_v.size() != want)
      __builtin_trap();
  } catch (const ratchet::Error&) {
  }
  return 0;
}
