// Tokenizing alone (no reading, no HDF5): HfTokenizer::encode of one text
// file, MB of text per CPU second of this thread, for each tokenizer given
// (`gpt2`, a tokenizer.json or a model directory). "cold": the first encode,
// whose per-thread piece cache starts empty (as a shard job's first
// document); "warm": the repeats after it. Meant for profiling the engine
// (`perf record bench_hf_encode ...`) and comparing families; the end-to-end
// figures are bench/data/tokenizer_compare.sh's.
//
//   bench_hf_encode FILE TOKENIZER... [--seconds 1]
#include <cstdio>
#include <ctime>
#include <string>
#include <vector>

#include "../bench_main.h"
#include "tokenizer/gpt2_tokenizer.h"
#include "tokenizer/json/engine.h"
#include "tokenizer/tokenizer_json.h"

using namespace ratchet;

namespace {

double cpu_now() {  // this thread's CPU seconds (the machine is shared)
  timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

}  // namespace

static int run_main(int argc, char** argv) {
  double seconds = 1.0;
  std::vector<std::string> args;
  for (int i = 1; i < argc; i++) {
    std::string a = argv[i];
    if (a == "--seconds" && i + 1 < argc)
      seconds = bench::parse_double_flag(a, argv[++i]);
    else
      args.push_back(a);
  }
  if (args.size() < 2) fail("usage: bench_hf_encode FILE TOKENIZER... [--seconds S]");
  const std::string text = hf::read_file(args[0], "text file");
  std::printf("%-50s %10s %10s %10s %12s\n", "tokenizer", "cold MB/s", "warm MB/s", "Mtok/s",
              "tokens");
  for (size_t k = 1; k < args.size(); k++) {
    std::unique_ptr<HfTokenizer> tok;
    if (args[k] == "gpt2") {
      const std::string dir = default_gpt2_dir();
      tok = HfTokenizer::from_gpt2_files(dir + "/encoder.json", dir + "/vocab.bpe");
    } else {
      tok = HfTokenizer::load(args[k]);
    }
    const double c0 = cpu_now();
    size_t tokens = tok->encode(text).size();
    const double cold = cpu_now() - c0;
    size_t reps = 0;
    const double t0 = cpu_now();
    double el = 0;
    do {
      tokens = tok->encode(text).size();
      reps++;
      el = cpu_now() - t0;
    } while (el < seconds);
    std::printf("%-50s %10.1f %10.1f %10.2f %12zu\n", args[k].c_str(),
                (double)text.size() / cold / 1e6, (double)text.size() * (double)reps / el / 1e6,
                (double)tokens * (double)reps / el / 1e6, tokens);
  }
  return 0;
}

int main(int argc, char** argv) {
  return bench::bench_main("bench_hf_encode", [&] { return run_main(argc, argv); });
}
