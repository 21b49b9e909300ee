// Token shards (data/shard_reader.h, data/shard_verify.h) with fuzzed root
// attributes and datasets: opening, reading and verifying either works or
// fails with ratchet::Error.
#include <algorithm>

#include "core/error.h"
#include "data/shard_format.h"
#include "data/shard_reader.h"
#if __has_include("data/shard_verify.h")
#include "data/shard_verify.h"
#else
#include "data_tools/shard_verify.h"
#endif
#include "fuzz_util.h"
#include "h5_fuzz_writer.h"

namespace sf = ratchet::shard_format;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  FuzzedDataProvider in(data, size);
  const std::string path = ratchet::fuzz::scratch_dir() + "/shard.h5";
  H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
  hid_t f = H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
  if (f < 0) return 0;
  if (in.ConsumeBool()) ratchet::fuzz::put_string(f, sf::kAttrFormat, sf::kFormat);
  else ratchet::fuzz::put_fuzzed_attr(in, f, sf::kAttrFormat, 0, 0);
  ratchet::fuzz::put_fuzzed_attr(in, f, sf::kAttrVersion, -1, 3);
  if (in.ConsumeBool()) ratchet::fuzz::put_string(f, sf::kAttrTokenizer, "byte");
  else ratchet::fuzz::put_fuzzed_attr(in, f, sf::kAttrTokenizer, 0, 0);
  for (const char* a : {sf::kAttrVocab, sf::kAttrEot, sf::kAttrNumTokens, sf::kAttrNumDocuments,
                        sf::kAttrMaxToken})
    ratchet::fuzz::put_fuzzed_attr(in, f, a, -2, 300);
  for (const char* a : {sf::kAttrToolVersion, sf::kAttrDedup, sf::kAttrDedupIn})
    ratchet::fuzz::put_fuzzed_attr(in, f, a, 0, 10);
  const size_t n = in.ConsumeIntegralInRange<size_t>(0, 64);
  ratchet::fuzz::put_fuzzed_dataset(in, f, sf::kTokens, n, 64);
  ratchet::fuzz::put_fuzzed_dataset(in, f, sf::kDocOffsets, 1 + n / 8, 16);
  H5Fclose(f);

  (void)ratchet::verify_shard(path);  // reports problems, never throws
  try {
    ratchet::ShardFile s(path);
    const uint64_t k = std::min<uint64_t>(s.num_tokens(), 4096);
    std::vector<uint32_t> t(k);
    s.read_tokens(0, k, t.data());
    (void)s.read_doc_offsets();
    (void)s.attribute_names();
  } catch (const ratchet::Error&) {
  }
  return 0;
}
