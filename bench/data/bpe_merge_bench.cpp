// BPE merge loop throughput (src/tokenizer/bpe_merge.h): MB of input bytes per
// CPU second (this thread's CPU time, not wall time) for
// each path (flat loop, heap, rank buckets, and the O(n^2) reference on
// short pieces) on one word of random lowercase letters of each length, with
// GPT-2's merges. Sets kBpeFlatMax and kBpeBucketMin, and shows the long-word
// rate (no pre-tokenizer, no HDF5: see tokenizer_compare.sh for end to end).
//
//   bench_bpe_merge [--max-bytes 10485760] [--seconds 0.3]
//
// Correctness pass first: every path gives the same ids on every length.
#include <cstdio>
#include <ctime>
#include <string>
#include <vector>

#include "../bench_main.h"
#include "core/rng.h"
#include "tokenizer/bpe_merge.h"
#include "tokenizer/gpt2_tokenizer.h"

using namespace ratchet;

namespace {

using Path = void (*)(std::vector<uint32_t>&, const BpeMergeTable&);

// This thread's CPU seconds: on a shared machine wall time measures the
// neighbours as much as the code.
double cpu_now() {
  timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

double rate_mb_s(Path path, const std::vector<uint32_t>& in, const BpeMergeTable& t, double seconds) {
  std::vector<uint32_t> w;
  size_t reps = 0;
  const double t0 = cpu_now();
  double el = 0;
  do {
    w = in;
    path(w, t);
    reps++;
    el = cpu_now() - t0;
  } while (el < seconds);
  return (double)in.size() * (double)reps / el / 1e6;
}

}  // namespace

static int run_main(int argc, char** argv) {
  long max_bytes = 10 << 20;
  double seconds = 0.3;
  for (int i = 1; i < argc; i++) {
    std::string a = argv[i];
    if (a == "--max-bytes" && i + 1 < argc)
      max_bytes = bench::parse_int_flag(a, argv[++i], 2, 1L << 30);
    else if (a == "--seconds" && i + 1 < argc)
      seconds = bench::parse_double_flag(a, argv[++i]);
    else
      fail("unknown argument '", a, "'; usage: bench_bpe_merge [--max-bytes N] [--seconds S]");
  }
  const std::string dir = default_gpt2_dir();
  Gpt2Tokenizer tok(dir + "/encoder.json", dir + "/vocab.bpe");
  const BpeMergeTable& t = tok.merges();
  Rng rng(1);
  std::printf("%10s %10s %10s %10s %10s   (MB per CPU second, random letters, GPT-2 merges)\n", "bytes",
              "flat", "heap", "buckets", "reference");
  for (long n : {8L, 16L, 32L, 48L, 64L, 128L, 512L, 2048L, 4096L, 16384L, 65536L, 1L << 20,
                 10L << 20}) {
    if (n > max_bytes) break;
    std::vector<uint32_t> in((size_t)n);
    for (auto& x : in) x = tok.byte_token((uint8_t)('a' + rng.below(26)));
    // Correctness: every path alike (the reference only where it is quick).
    std::vector<uint32_t> heap = in, buckets = in;
    bpe_merge_heap(heap, t);
    bpe_merge_buckets(buckets, t);
    if (heap != buckets) fail("heap and bucket paths differ at ", n, " bytes");
    if ((size_t)n <= kBpeFlatMax) {
      std::vector<uint32_t> flat = in;
      bpe_merge_flat(flat, t);
      if (flat != heap) fail("flat and heap paths differ at ", n, " bytes");
    }
    if (n <= 4096) {
      std::vector<uint32_t> ref = in;
      bpe_merge_reference(ref, t);
      if (ref != heap) fail("reference and heap paths differ at ", n, " bytes");
    }
    auto cell = [&](bool run, Path p) {
      if (run)
        std::printf(" %10.2f", rate_mb_s(p, in, t, seconds));
      else
        std::printf(" %10s", "-");
    };
    std::printf("%10ld", n);
    cell((size_t)n <= kBpeFlatMax, bpe_merge_flat);
    cell(true, bpe_merge_heap);
    cell(true, bpe_merge_buckets);
    cell(n <= 4096, bpe_merge_reference);
    std::printf("\n");
    std::fflush(stdout);
  }
  return 0;
}

int main(int argc, char** argv) {
  return bench::bench_main("bench_bpe_merge", [&] { return run_main(argc, argv); });
}
