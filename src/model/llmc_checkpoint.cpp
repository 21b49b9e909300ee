#include "model/llmc_checkpoint.h"

#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <stdexcept>

#include "core/error.h"
#include "model/param_layout.h"

namespace ratchet {

namespace {
struct FileCloser {
  FILE* f;
  ~FileCloser() {
    if (f) std::fclose(f);
  }
};
}  // namespace

std::string llmc_model_file_kind(const std::string& path) {
  FILE* f = std::fopen(path.c_str(), "rb");
  if (!f) return "";
  FileCloser closer{f};
  int32_t h[2] = {0, 0};
  if (std::fread(h, sizeof h, 1, f) != 1 || h[0] != kLlmcModelMagic) return "";
  return "an llm.c GPT-2 model file (magic " + std::to_string(kLlmcModelMagic) + ", version " +
         std::to_string(h[1]) +
         (h[1] == kLlmcVersionFp32 ? ", fp32)" : h[1] == kLlmcVersionBf16 ? ", bf16)" : ")");
}

namespace {
// The header, checked against the file's size: everything but the weights.
GPTConfig read_header(FILE* f, const std::string& path, size_t* elem) {
  int32_t h[256];
  if (std::fread(h, sizeof h, 1, f) != 1)
    fail("checkpoint ", path, " is shorter than the 1024-byte llm.c header: not an llm.c "
         "GPT-2 checkpoint, or truncated");
  if (h[0] != kLlmcModelMagic)
    fail("checkpoint ", path, " has magic ", h[0], ", expected ", kLlmcModelMagic,
         " (llm.c GPT-2 model file): wrong file?");
  if (h[1] != kLlmcVersionFp32 && h[1] != kLlmcVersionBf16)
    fail("checkpoint ", path, " has version ", h[1], "; supported: 3 (fp32) and 5 (bf16). "
         "Re-export it with llm.c's train_gpt2.py");
  GPTConfig c;
  c.max_seq_len = h[2];
  c.vocab_size = h[3];
  c.num_layers = h[4];
  c.num_heads = h[5];
  c.channels = h[6];
  c.padded_vocab = h[7];
  // llm.c's header fields: maxT, V, L, NH, C, Vp, named as ratchet's checkpoints name them.
  try {
    c.finalize(kCheckpointNames);
  } catch (const Error& e) {
    fail("checkpoint ", path, " has an invalid header: ", e.what());
  }
  if (c.padded_vocab != h[7] || c.padded_vocab < c.vocab_size)
    fail("checkpoint ", path, " has padded_vocab_size ", h[7], " < vocab_size ", h[3]);
  *elem = h[1] == kLlmcVersionFp32 ? 4 : 2;
  // The header's sizes can announce more bytes than size_t counts (a damaged
  // or hostile file): compare in floating point before any exact arithmetic.
  {
    const long double Vp = c.padded_vocab, C = c.channels, L = c.num_layers, T = c.max_seq_len;
    const long double count = Vp * C + T * C + L * (12 * C * C + 13 * C) + 2 * C;
    std::error_code ec;
    const auto bytes = std::filesystem::file_size(path, ec);
    if (!ec && 1024 + count * *elem > (long double)bytes + 0.5L)
      fail("checkpoint ", path, " has a header (", c.describe(), ", version ", h[1], ") that needs ",
           (double)(1024 + count * *elem), " bytes but the file has ", bytes,
           ": truncated, corrupted, or not an llm.c GPT-2 checkpoint");
  }
  const ParamLayout lay(c);
  const auto expect = 1024 + lay.total * *elem;
  std::error_code ec;
  const auto actual = std::filesystem::file_size(path, ec);
  if (ec || actual != expect)
    fail("checkpoint ", path, " is ", actual, " bytes but its header (", c.describe(),
         ", version ", h[1], ") needs ", expect, ": truncated or corrupted");
  return c;
}
}  // namespace

GPTConfig read_llmc_config(const std::string& path) {
  FILE* f = std::fopen(path.c_str(), "rb");
  if (!f) fail("cannot open checkpoint ", path, ": ", std::strerror(errno));
  FileCloser closer{f};
  size_t elem = 0;
  return read_header(f, path, &elem);
}

std::vector<float> load_llmc_checkpoint(const std::string& path, GPTConfig* cfg) {
  FILE* f = std::fopen(path.c_str(), "rb");
  if (!f) fail("cannot open checkpoint ", path, ": ", std::strerror(errno));
  FileCloser closer{f};
  size_t elem = 0;
  const GPTConfig c = read_header(f, path, &elem);
  const ParamLayout lay(c);
  std::vector<float> params(lay.total);
  if (elem == 4) {
    if (std::fread(params.data(), 4, lay.total, f) != lay.total)
      fail("short read from checkpoint ", path);
  } else {
    std::vector<uint16_t> raw(lay.total);
    if (std::fread(raw.data(), 2, lay.total, f) != lay.total)
      fail("short read from checkpoint ", path);
    for (size_t i = 0; i < lay.total; i++) {
      uint32_t bits = (uint32_t)raw[i] << 16;  // bf16 is the top half of an fp32
      std::memcpy(&params[i], &bits, 4);
    }
  }
  // A NaN or inf would train from damaged weights and fail later, blaming the
  // learning rate (issue 25): refused here, naming the tensor.
  if (const std::string bad = first_non_finite(lay, params); !bad.empty())
    fail("checkpoint ", path, ": ", bad, ": the file is damaged (or was saved after a diverged "
         "run); ratchet imports finite weights only");
  *cfg = c;
  return params;
}

void save_llmc_checkpoint(const std::string& path, const GPTConfig& cfg,
                          const std::vector<float>& params) {
  if (cfg.llama())
    fail("cannot write ", path, ": the llm.c .bin format holds GPT-2 models only and this model "
         "is a llama (", cfg.describe(), "); export it as Hugging Face safetensors instead "
         "(--export-hf DIR, or ratchet ckpt export --format hf)");
  ParamLayout lay(cfg);
  RATCHET_ASSERT(params.size() == lay.total);
  // Diverged weights are not a model (issue 25: a NaN export was written).
  if (const std::string bad = first_non_finite(lay, params); !bad.empty())
    throw std::runtime_error("not writing " + path + ": " + bad +
                             ": the weights are not finite (the run diverged)");
  int32_t h[256] = {0};
  h[0] = kLlmcModelMagic;
  h[1] = kLlmcVersionFp32;
  h[2] = cfg.max_seq_len;
  h[3] = cfg.vocab_size;
  h[4] = cfg.num_layers;
  h[5] = cfg.num_heads;
  h[6] = cfg.channels;
  h[7] = cfg.padded_vocab;
  const std::string tmp = path + ".tmp." + std::to_string(getpid());
  FILE* f = std::fopen(tmp.c_str(), "wb");
  if (!f) fail("cannot write ", tmp, " (for --export ", path, "): ", std::strerror(errno));
  bool ok = std::fwrite(h, sizeof h, 1, f) == 1 &&
            std::fwrite(params.data(), 4, params.size(), f) == params.size();
  ok = (std::fflush(f) == 0) && ok;
  ok = (fsync(fileno(f)) == 0) && ok;
  ok = (std::fclose(f) == 0) && ok;
  if (!ok) {
    std::remove(tmp.c_str());
    fail("writing ", path, " failed (disk full?): ", std::strerror(errno));
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    std::remove(tmp.c_str());
    fail("cannot rename ", tmp, " to ", path, ": ", std::strerror(errno));
  }
}

}  // namespace ratchet
