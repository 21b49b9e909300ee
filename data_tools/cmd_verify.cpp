// `ratchet verify SHARDS...`: deep checks of token shards (data_tools/shard_verify.h).
// Prints "ok <path> ..." or "FAILED <path>: <problem>" per shard; exits 0 when
// all pass, 1 when any fails, 2 on bad arguments.
#include <boost/program_options.hpp>
#include <cstdio>
#include <iostream>
#include <optional>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "cli/options_util.h"
#include "data_tools/commands.h"
#include "core/error.h"
#include "data/shard_reader.h"
#include "data/tokenizer_identity.h"
#include "data_tools/shard_verify.h"

namespace ratchet {
namespace po = boost::program_options;

int cmd_verify(int argc, char** argv) {
  std::vector<std::string> shards;
  bool quiet = false;
  po::options_description desc("ratchet verify: check token shards thoroughly\n\noptions");
  desc.add_options()("help,h", "show this help")(
      "shard", po::value(&shards)->multitoken(), "shard files or globs (also positional)")(
      "quiet,q", po::bool_switch(&quiet), "print only failures");
  po::positional_options_description pos;
  pos.add("shard", -1);
  po::variables_map vm;
  if (!parse_options(argc, argv, desc, vm, "verify", &pos, true))
    return kExitUsage;
  if (vm.count("help")) {
    std::cout << desc << R"(
Checks every shard: HDF5 schema and attributes (format, format_version,
tokenizer, vocab_size, eot_token, num_tokens, num_documents, max_token),
/doc_offsets increasing and in range, every chunk of /tokens readable and
every token id < vocab_size, and that all shards agree on the tokenizer.
Exit code 0: all good; 1: a shard failed (the message says which and where);
2: bad arguments.

Examples:
  ratchet verify data/train_*.h5 data/val_*.h5
  ratchet verify 'data/*.h5' --quiet
)";
    return kExitOk;
  }
  if (shards.empty()) fail("no shard given: ratchet verify SHARDS... (see --help)");
  std::vector<std::string> paths = expand_shard_paths(shards, "shard");
  size_t failed = 0;
  std::optional<ShardMeta> first_ok;  // the first good shard, for the note below
  bool noted = false;
  verify_shards(paths, [&](const ShardCheck& c) {
    if (c.ok) {
      // One tokenizer by its digest (issue 36); the other path is worth a word.
      if (!first_ok) first_ok = c.meta;
      else if (!noted && !quiet && same_tokenizer_other_path(*first_ok, c.meta)) {
        std::printf("note: %s records the same tokenizer.json (sha256 %s) at another path: %s, "
                    "not %s\n", c.path.c_str(), c.meta.tokenizer_sha256.substr(0, 16).c_str(),
                    c.meta.tokenizer.c_str(), first_ok->tokenizer.c_str());
        noted = true;
      }
      if (!quiet)
        std::printf("ok %s: %llu tokens, %llu documents, %llu chunks, tokenizer %s, vocab %d\n",
                    c.path.c_str(), (unsigned long long)c.tokens,
                    (unsigned long long)c.documents, (unsigned long long)c.chunks,
                    c.meta.tokenizer.c_str(), c.meta.vocab_size);
    } else {
      failed++;
      std::fprintf(stderr, "FAILED %s: %s\n", c.path.c_str(), c.problem.c_str());
    }
    std::fflush(stdout);
  });
  if (failed) {
    std::fprintf(stderr, "ratchet verify: error: %zu of %zu shard(s) failed verification\n",
                 failed, paths.size());
    return kExitFailure;
  }
  if (!quiet) std::printf("verify: all %zu shard(s) ok\n", paths.size());
  return kExitOk;
}

}  // namespace ratchet
