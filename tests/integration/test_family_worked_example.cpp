// docs/model-families.md's worked example (issue 38, item 6): Qwen3's own
// tokenizer.json -> shard -> train a small qwen3 -> ratchet eval ->
// --export-hf. The test runs the page's ```sh block (the first after the
// heading "## Worked example") in a fresh directory with this build's
// ratchet on PATH; only `--steps 200` becomes `--steps 4` and
// `--eval-every 100` `--eval-every 2`, each required to appear exactly once.
// Then: the shard token counts the page states; the export's config.json
// says qwen3 with head_dim 32 and its safetensors hold the q/k norms; and
// `ratchet eval` printed a finite loss for the val shards.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <regex>
#include <string>

#include "core/json.h"
#include "testing/test_util.h"
#include "testing/worked_example.h"

using namespace ratchet;
using namespace ratchet::testing;
namespace fs = std::filesystem;

namespace {

TEST(FamilyWorkedExample, Qwen3RunsAsWrittenAndExports) {
  if (!fs::exists("/usr/local/share/ratchet/hf-tokenizers/qwen3/tokenizer.json"))
    GTEST_SKIP() << "Qwen3's tokenizer.json is not installed (scripts/install-deps.sh)";
  if (system("command -v bible >/dev/null 2>&1") != 0)
    GTEST_SKIP() << "bible-kjv is not installed (scripts/install-deps.sh)";
  std::string block = worked_example_block("docs/model-families.md");
  ASSERT_FALSE(block.empty()) << "docs/model-families.md has no ```sh block after '## Worked example'";
  replace_once(block, "--steps 200", "--steps 4");
  replace_once(block, "--eval-every 100", "--eval-every 2");
  TempDir d;
  const RunResult r = run_worked_example(d.path, block);
  ASSERT_EQ(r.exit_code, 0) << block << "\n" << r.output;

  // The token counts the page states.
  EXPECT_NE(r.output.find("1123636 tokens"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("57244 tokens"), std::string::npos) << r.output;

  // The export: qwen3's config.json and tensor names.
  const fs::path out = fs::path(d.path) / "kjv-qwen3-model";
  std::ifstream cf(out / "config.json");
  ASSERT_TRUE(cf.good()) << "no config.json in " << out;
  const nlohmann::json cfg = nlohmann::json::parse(cf);
  EXPECT_EQ(cfg.value("model_type", ""), "qwen3");
  EXPECT_EQ(cfg["architectures"][0], "Qwen3ForCausalLM");
  EXPECT_EQ(cfg.value("head_dim", 0), 32);
  EXPECT_TRUE(fs::exists(out / "tokenizer.json"));
  const std::string st = read_file(out / "model.safetensors");
  EXPECT_NE(st.find("model.layers.1.self_attn.q_norm.weight"), std::string::npos);
  EXPECT_NE(st.find("model.layers.1.self_attn.k_norm.weight"), std::string::npos);

  // ratchet eval's loss on the val shards: a finite number no worse than a
  // little above a uniform guess (ln 151936 = 11.93; 4 steps barely move it).
  std::smatch m;
  const std::regex loss_re(R"(data kjv: loss ([0-9]+\.[0-9]+))");
  ASSERT_TRUE(std::regex_search(r.output, m, loss_re)) << r.output;
  const double loss = std::stod(m[1]);
  EXPECT_TRUE(std::isfinite(loss) && loss > 0 && loss < 12.5) << loss;
}

}  // namespace
