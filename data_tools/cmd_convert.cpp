// `ratchet convert INPUT OUTPUT`: llm.c token files (data_tools/llmc_tokens.h) to
// ratchet HDF5 shards and back. The direction follows INPUT: an llm.c file
// (magic 20240520) becomes an HDF5 shard, an HDF5 shard becomes an llm.c
// file. The token stream is kept exactly, so a round trip is byte-identical.
#include <boost/program_options.hpp>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "cli/options_util.h"
#include "data_tools/commands.h"
#include "core/error.h"
#include "data_tools/llmc_tokens.h"
#include "core/sha256.h"
#include "data/shard_reader.h"
#include "data_tools/shard_writer.h"
#include "tokenizer/tokenizer.h"
#include "model/llmc_checkpoint.h"
#include "version.h"

namespace ratchet {
namespace po = boost::program_options;

int cmd_convert(int argc, char** argv) {
  std::vector<std::string> files;
  std::string tokenizer = "gpt2";
  int vocab = 50257, eot = 50256;
  bool overwrite = false;
  po::options_description desc("ratchet convert: llm.c token files <-> HDF5 shards\n\noptions");
  // clang-format off
  desc.add_options()
    ("help,h", "show this help")
    ("files", po::value(&files)->multitoken(), "INPUT OUTPUT (positional)")
    ("tokenizer", po::value(&tokenizer)->default_value(tokenizer),
       "llm.c -> HDF5: the tokenizer name to record (llm.c files do not say)")
    ("vocab-size", po::value(&vocab)->default_value(vocab), "llm.c -> HDF5: vocab_size to record")
    ("eot", po::value(&eot)->default_value(eot), "llm.c -> HDF5: the end-of-text id")
    ("overwrite", po::bool_switch(&overwrite), "replace OUTPUT if it exists");
  // clang-format on
  po::positional_options_description pos;
  pos.add("files", -1);
  po::variables_map vm;
  if (!parse_options(argc, argv, desc, vm, "convert", &pos, true))
    return kExitUsage;
  if (vm.count("help")) {
    std::cout << desc << R"(
llm.c's format: a 256 x int32 header (magic 20240520, version 1, token count)
then the tokens as uint16. llm.c starts each document with the end-of-text
token, ratchet ends each with it; the stream is converted unchanged and
/doc_offsets marks position 0 and every position after an end-of-text token.

Examples:
  ratchet convert fineweb_train_000001.bin data/train_000001.h5
  ratchet convert data/train_000000.h5 train_000000.bin
)";
    return kExitOk;
  }
  if (files.size() != 2) fail("pass INPUT and OUTPUT: ratchet convert INPUT OUTPUT (see --help)");
  const std::string& in = files[0];
  const std::string& out = files[1];
  FILE* probe = std::fopen(out.c_str(), "rb");
  if (probe) {
    std::fclose(probe);
    if (!overwrite) fail("OUTPUT ", out, " exists: pass --overwrite to replace it");
  }
  if (is_llmc_tokens_file(in)) {
    std::vector<uint32_t> tokens = read_llmc_tokens(in);
    if (eot < 0 || eot >= vocab) fail("--eot ", eot, " is not inside --vocab-size ", vocab);
    ShardMeta meta{tokenizer, vocab, eot};
    ShardProvenance prov;
    prov.tool_version = std::string("ratchet ") + RATCHET_VERSION;
    prov.source_files = {in};
    prov.source_sha256 = {sha256_file(in)};
    std::vector<uint64_t> offsets = doc_offsets_from_eot(tokens, (uint32_t)eot);
    for (size_t i = 0; i < tokens.size(); i++)
      if (tokens[i] >= (uint32_t)vocab)
        fail(in, ": token ", i, " is ", tokens[i], ", not below --vocab-size ", vocab,
             ": pass the vocab size the file was made with");
    write_shard(out, meta, tokens, offsets, shard_format::kChunkTokens, &prov);
    std::printf("convert: %s (llm.c, %zu tokens) -> %s (HDF5, %zu documents, tokenizer %s)\n",
                in.c_str(), tokens.size(), out.c_str(), offsets.size(), tokenizer.c_str());
    return kExitOk;
  }
  // Say what a file is when it is neither kind (ShardFile would only say
  // "not an HDF5 file").
  const std::string model = llmc_model_file_kind(in);
  if (!model.empty())
    fail("INPUT ", in, " is ", model, ", not tokens: convert turns llm.c token files "
         "(magic ", kLlmcMagic, ") into HDF5 shards and back. Use a model file with `ratchet train "
         "--init-from`");
  if (std::filesystem::is_directory(in))
    fail("INPUT ", in, " is a directory", std::filesystem::exists(in + "/state.h5")
         ? " (a ratchet checkpoint: `ratchet ckpt export` writes its weights as an llm.c model file)"
         : "", ": convert takes one llm.c token file or one HDF5 shard");
  ShardFile shard(in);  // errors name the file (not HDF5, not a shard, corrupt)
  if (shard.meta().vocab_size > 65536)
    fail("shard ", in, " has vocab_size ", shard.meta().vocab_size,
         ": llm.c's version 1 format holds uint16 tokens only");
  std::vector<uint32_t> tokens(shard.num_tokens());
  shard.read_tokens(0, tokens.size(), tokens.data());
  write_llmc_tokens(out, tokens);
  std::printf("convert: %s (HDF5, %zu tokens) -> %s (llm.c)\n", in.c_str(), tokens.size(),
              out.c_str());
  return kExitOk;
}

}  // namespace ratchet
