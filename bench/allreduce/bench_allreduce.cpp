// Collective benchmark over ratchet's Communicator, in the nccl-tests style.
//
//   mpirun -np 2 bench_allreduce [--min-bytes 1K] [--max-bytes 256M] [--factor 2]
//                                [--op all_reduce|reduce_scatter|all_gather]
//                                [--iters 0] [--warmup 5] [--json]
//
// For each size: a correctness pass first (integer-valued float32 data, so
// every sum is exact: rank r holds (r+1)·(i mod 7), the sum is W(W+1)/2·(i mod 7)),
// then warm-up, then timed iterations (by default enough for ~0.2 s, at least 5).
// time = the slowest rank's mean per call. As nccl-tests:
//   algbw = bytes / time            (bytes = the whole buffer, W·count for RS/AG)
//   busbw = algbw · 2(n-1)/n        all-reduce
//         = algbw · (n-1)/n         reduce-scatter, all-gather
// busbw is comparable with the link's bandwidth whatever the rank count.
#include <boost/program_options.hpp>
#include <cmath>
#include <cstdio>
#include <iostream>
#include <string>
#include <vector>

#include "../bench_main.h"
#include "core/error.h"
#include "core/json.h"
#include "core/log.h"
#include "distributed/communicator.h"

namespace po = boost::program_options;
using namespace ratchet;

namespace {

size_t parse_size(const std::string& s) {
  char* end = nullptr;
  double v = std::strtod(s.c_str(), &end);
  const std::string unit = end;
  if (unit == "K" || unit == "KiB") v *= 1024;
  else if (unit == "M" || unit == "MiB") v *= 1024 * 1024;
  else if (unit == "G" || unit == "GiB") v *= 1024.0 * 1024 * 1024;
  else if (!unit.empty()) fail("bad size '", s, "': use e.g. 1K, 256M");
  return (size_t)v;
}

std::string human(size_t b) {
  char buf[32];
  if (b >= (1u << 20)) std::snprintf(buf, sizeof buf, "%zuM", b >> 20);
  else if (b >= 1024) std::snprintf(buf, sizeof buf, "%zuK", b >> 10);
  else std::snprintf(buf, sizeof buf, "%zu", b);
  return buf;
}

}  // namespace

static int run_main(int argc, char** argv) {
  std::string min_s = "1K", max_s = "256M", op = "all_reduce";
  double factor = 2;
  int iters = 0, warmup = 5;
  bool json = false;
  po::options_description desc("bench_allreduce: collective bandwidth over the Communicator");
  desc.add_options()("help,h", "help")
    ("min-bytes,b", po::value(&min_s)->default_value(min_s), "smallest buffer")
    ("max-bytes,e", po::value(&max_s)->default_value(max_s), "largest buffer")
    ("factor,f", po::value(&factor)->default_value(factor), "size multiplier between rows")
    ("op", po::value(&op)->default_value(op), "all_reduce | reduce_scatter | all_gather")
    ("iters,n", po::value(&iters)->default_value(iters), "timed calls per size (0: ~0.2 s worth)")
    ("warmup,w", po::value(&warmup)->default_value(warmup), "untimed calls per size")
    ("json", po::bool_switch(&json), "one JSON object per size instead of the table");
  po::variables_map vm;
  try {
    po::store(po::parse_command_line(argc, argv, desc), vm);
    po::notify(vm);
  } catch (const po::error& e) {
    std::cerr << "bench_allreduce: " << e.what() << "\n";
    return 2;
  }
  if (vm.count("help")) {
    std::cout << desc << "\nexample: mpirun -np 2 bench_allreduce -b 1K -e 256M -f 2\n";
    return 0;
  }
  std::unique_ptr<Communicator> comm;
  try {
    comm = make_communicator();
    if (op != "all_reduce" && op != "reduce_scatter" && op != "all_gather")
      fail("--op must be all_reduce, reduce_scatter or all_gather");
  } catch (const Error& e) {
    std::fprintf(stderr, "bench_allreduce: error: %s\n", e.what());
    return 2;
  }
  const int W = comm->world(), r = comm->rank();
  const size_t min_b = parse_size(min_s), max_b = parse_size(max_s);
  const double bus = op == "all_reduce" ? 2.0 * (W - 1) / W : (double)(W - 1) / W;
  if (!json) {
    RLOG("# %s over %d rank(s) (%s communicator), float32, sum; time = slowest rank's mean\n",
         op.c_str(), W, comm->name().c_str());
    if (W == 1) RLOG("# one rank: the collectives are copies or nothing; run under mpirun -np N\n");
    RLOG("#%11s %12s %8s %11s %12s %12s %7s\n", "size(B)", "count", "iters", "time(us)",
         "algbw(GB/s)", "busbw(GB/s)", "#wrong");
  }
  // Buffers sized for the largest case: all_reduce (n), RS: send W·n, recv n; AG: send n, recv W·n.
  const size_t max_elems = std::max<size_t>(1, max_b / 4);
  std::vector<float> a(max_elems), b(max_elems);
  long total_wrong = 0;
  for (size_t bytes = min_b; bytes <= max_b;
       bytes = std::max(bytes + 4, (size_t)std::llround(bytes * factor))) {
    const size_t total = std::max<size_t>(1, bytes / 4);           // elements in the whole buffer
    const size_t count = op == "all_reduce" ? total : std::max<size_t>(1, total / W);  // per call
    const size_t whole = op == "all_reduce" ? total : count * W;
    auto run_once = [&]() {
      if (op == "all_reduce") comm->all_reduce(a.data(), count, DType::F32, ReduceOp::Sum);
      else if (op == "reduce_scatter")
        comm->reduce_scatter(a.data(), b.data(), count, DType::F32, ReduceOp::Sum);
      else comm->all_gather(a.data() + (size_t)r * count, b.data(), count, DType::F32);
    };
    // ---- correctness pass --------------------------------------------------
    for (size_t i = 0; i < whole; i++) a[i] = (float)((r + 1) * (i % 7));
    if (op == "all_gather")  // rank r's block holds r+1 at every element
      for (size_t i = 0; i < count; i++) a[r * count + i] = (float)(r + 1);
    run_once();
    long wrong = 0;
    const float ranks = W * (W + 1) / 2.0f;
    if (op == "all_reduce") {
      for (size_t i = 0; i < count; i++) wrong += a[i] != ranks * (float)(i % 7);
    } else if (op == "reduce_scatter") {
      for (size_t i = 0; i < count; i++) wrong += b[i] != ranks * (float)((r * count + i) % 7);
    } else {
      for (size_t i = 0; i < whole; i++) wrong += b[i] != (float)(i / count + 1);
    }
    wrong = (long)comm->all_reduce_sum((double)wrong);
    total_wrong += wrong;
    // ---- warm-up, then timed calls ----------------------------------------
    for (int i = 0; i < warmup; i++) run_once();
    int n = iters;
    if (n <= 0) {  // calibrate: ~0.2 s, at least 5 calls, the same count on every rank
      comm->barrier();
      const double t0 = now_s();
      run_once();
      double one = now_s() - t0;
      comm->all_reduce(&one, 1, DType::F64, ReduceOp::Max);
      n = (int)std::min(10000.0, std::max(5.0, 0.2 / std::max(one, 1e-7)));
    }
    comm->barrier();
    const double t0 = now_s();
    for (int i = 0; i < n; i++) run_once();
    double t = (now_s() - t0) / n;
    comm->all_reduce(&t, 1, DType::F64, ReduceOp::Max);
    const double algbw = (double)whole * 4 / t / 1e9;
    if (json)
      RLOG("%s\n", json_line({{"op", op},
                               {"ranks", W},
                               {"bytes", whole * 4},
                               {"count", count},
                               {"iters", n},
                               {"time_us", t * 1e6},
                               {"algbw_gbs", algbw},
                               {"busbw_gbs", algbw * bus},
                               {"wrong", wrong}})
                        .c_str());
    else
      RLOG("%12s %12zu %8d %11.2f %12.3f %12.3f %7ld\n", human(whole * 4).c_str(), count, n,
           t * 1e6, algbw, algbw * bus, wrong);
  }
  if (!json) RLOG("# out of bounds values: %ld %s\n", total_wrong, total_wrong ? "FAILED" : "OK");
  return total_wrong ? 1 : 0;
}

// Uncaught exceptions become exit 2 (bad input) or 1 (bench/bench_main.h).
int main(int argc, char** argv) {
  return ratchet::bench::bench_main("bench_allreduce", [&] { return run_main(argc, argv); });
}
