// simt_launch_table: prints the launch configuration of every non-attention
// kernel of a training step at the largest shapes (dry runs, launch_shapes.h),
// one line per distinct (kernel, block threads, dynamic smem):
//   <kernel base name> <threads per block> <dynamic smem bytes>
// bench/kernels/ptxas_resources.py checks them against each kernel's ptxas
// resources (registers limit the threads a block can have).
#include <cstdio>
#include <set>
#include <string>
#include <tuple>

#include "launch_shapes.h"

using namespace ratchet::testing::launch;

namespace {
// "(fused_classifier_kernel<T>)" -> "fused_classifier_kernel"
std::string base_name(std::string n) {
  n.erase(0, n.find_first_not_of("( "));
  const size_t cut = n.find_first_of("<)");
  return cut == std::string::npos ? n : n.substr(0, cut);
}
}  // namespace

int main() {
  std::set<std::tuple<std::string, unsigned long long, size_t>> seen;
  auto add = [&](const std::vector<LaunchRecord>& launches) {
    for (const LaunchRecord& r : launches)
      seen.insert({base_name(r.name), (unsigned long long)r.block.x * r.block.y * r.block.z,
                   r.smem});
  };
  for (const Shape& s : kShapes) {
    add(dry_run_step<float>(s));
    add(dry_run_step<bf16>(s));
  }
  for (const auto& [name, threads, smem] : seen)
    std::printf("%s %llu %zu\n", name.c_str(), threads, smem);
  return 0;
}
