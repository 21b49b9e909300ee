// Loader throughput: windows/s (and tokens/s) of DataLoader over real shards,
// sequential and shuffled, synchronous and prefetching.
//
//   bench_loader 'data/train_*.h5' [--B 8] [--T 1024] [--seconds 3] [--json]
//
// Warm-up pass first (chunk cache, permutation), a correctness pass (the
// prefetching loader returns exactly the synchronous loader's batches), then
// timed passes. Prefetch numbers measure the producer rate (the consumer only
// copies); wait = time next_batch() waited.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "../bench_main.h"
#include "core/error.h"
#include "core/json.h"
#include "data/loader.h"
#include "data/token_dataset.h"

using namespace ratchet;

static int run_main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: bench_loader SHARDS [--B 8] [--T 1024] [--seconds 3] [--json]\n");
    return 2;
  }
  std::string pattern = argv[1];
  int B = 8, T = 1024;
  double seconds = 3;
  bool json = false;
  for (int i = 2; i < argc; i++) {
    const std::string a = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) ratchet::fail(a, " needs a value");
      return argv[++i];
    };
    if (a == "--B") B = (int)ratchet::bench::parse_int_flag(a, next(), 1, 1 << 20);
    else if (a == "--T") T = (int)ratchet::bench::parse_int_flag(a, next(), 1, 1 << 24);
    else if (a == "--seconds") seconds = ratchet::bench::parse_double_flag(a, next());
    else if (a == "--json") json = true;
    else ratchet::fail("unknown option '", a, "' (usage: bench_loader SHARDS [--B 8] [--T 1024] "
                       "[--seconds 3] [--json])");
  }
  try {
    TokenDataset data(pattern, "shards");
    std::vector<int32_t> x((size_t)B * T), y((size_t)B * T), x2(x.size()), y2(y.size());
    if (!json)
      std::printf("%s: %llu tokens; B=%d T=%d\n", pattern.c_str(),
                  (unsigned long long)data.num_tokens(), B, T);
    for (bool shuffle : {false, true})
      for (int prefetch : {0, 2}) {
        // Correctness pass.
        DataLoader a(data, B, T, shuffle, 1, 0, 1, LoaderOptions{prefetch, {}});
        DataLoader ref(data, B, T, shuffle, 1, 0, 1, LoaderOptions{0, {}});
        for (int k = 0; k < 5; k++) {
          a.next_batch(x.data(), y.data());
          ref.next_batch(x2.data(), y2.data());
          if (x != x2 || y != y2) {
            std::fprintf(stderr, "bench_loader: batch %d differs\n", k);
            return 1;
          }
        }
        // Timed.
        DataLoader l(data, B, T, shuffle, 2, 0, 1, LoaderOptions{prefetch, {}});
        for (int k = 0; k < 3; k++) l.next_batch(x.data(), y.data());  // warm up
        const double w0 = l.wait_seconds();
        auto t0 = std::chrono::steady_clock::now();
        long batches = 0;
        double el = 0;
        while (el < seconds) {
          l.next_batch(x.data(), y.data());
          batches++;
          el = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        }
        const double wps = batches * B / el;
        if (json)
          std::printf("%s\n", json_line({{"bench", "loader"},
                                          {"shuffle", shuffle},
                                          {"prefetch", prefetch},
                                          {"B", B},
                                          {"T", T},
                                          {"windows_per_s", wps},
                                          {"tokens_per_s", wps * T}})
                                   .c_str());
        else
          std::printf("  %-10s prefetch %d: %10.0f windows/s  %8.1fM tokens/s  (waited %.2f s "
                      "of %.2f s)\n",
                      shuffle ? "shuffled" : "sequential", prefetch, wps, wps * T / 1e6,
                      l.wait_seconds() - w0, el);
      }
  } catch (const Error& e) {
    std::fprintf(stderr, "bench_loader: error: %s\n", e.what());
    return 2;
  }
  return 0;
}

// Uncaught exceptions become exit 2 (bad input) or 1 (bench/bench_main.h).
int main(int argc, char** argv) {
  return ratchet::bench::bench_main("bench_loader", [&] { return run_main(argc, argv); });
}
