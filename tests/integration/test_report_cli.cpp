// `ratchet report` end to end: a real (short) training run's log becomes a
// summary and a PNG + SVG whose curves are really drawn (the PNG is decoded
// and the curve colours are found in the right panel); a synthetic log with
// replayed steps, a torn last line and a ledger; and every bad input.
#include <gtest/gtest.h>
#include <zlib.h>

#include <cstdint>
#include <string>
#include <vector>

#include "testing/test_util.h"

using namespace ratchet::testing;

namespace {

// ---- a minimal PNG reader (8-bit RGB/RGBA, not interlaced: what pngcairo writes)
struct Image {
  uint32_t width = 0, height = 0;
  int channels = 0;
  std::vector<uint8_t> pixels;  // rows of width*channels bytes
  const uint8_t* at(uint32_t x, uint32_t y) const {
    return pixels.data() + ((size_t)y * width + x) * channels;
  }
};

uint32_t be32(const std::string& s, size_t i) {
  return (uint32_t)(uint8_t)s[i] << 24 | (uint32_t)(uint8_t)s[i + 1] << 16 |
         (uint32_t)(uint8_t)s[i + 2] << 8 | (uint32_t)(uint8_t)s[i + 3];
}

// Returns an empty image (width 0) and sets *why when the file is not a PNG
// this reader understands.
Image decode_png(const std::string& png, std::string* why) {
  Image img;
  if (png.size() < 33 || png.compare(0, 8, "\x89PNG\r\n\x1a\n") != 0) {
    *why = "no PNG signature";
    return img;
  }
  if (png.compare(12, 4, "IHDR") != 0) {
    *why = "first chunk is not IHDR";
    return img;
  }
  const uint32_t w = be32(png, 16), h = be32(png, 20);
  const int depth = (uint8_t)png[24], color = (uint8_t)png[25], interlace = (uint8_t)png[28];
  if (depth != 8 || (color != 2 && color != 6) || interlace != 0) {
    *why = "unsupported PNG: depth " + std::to_string(depth) + " color " + std::to_string(color);
    return img;
  }
  std::string idat;
  bool iend = false;
  for (size_t i = 8; i + 12 <= png.size();) {
    const uint32_t len = be32(png, i);
    const std::string type = png.substr(i + 4, 4);
    if (i + 12 + len > png.size()) break;
    // every chunk's CRC covers type and data
    const uint32_t crc = (uint32_t)crc32(0, (const Bytef*)png.data() + i + 4, len + 4);
    if (crc != be32(png, i + 8 + len)) {
      *why = "bad CRC in chunk " + type;
      return img;
    }
    if (type == "IDAT") idat += png.substr(i + 8, len);
    if (type == "IEND") iend = true;
    i += 12 + len;
  }
  if (!iend) {
    *why = "no IEND chunk (truncated file)";
    return img;
  }
  const int ch = color == 6 ? 4 : 3;
  const size_t stride = (size_t)w * ch;
  std::vector<uint8_t> raw((stride + 1) * h);
  uLongf n = raw.size();
  if (uncompress(raw.data(), &n, (const Bytef*)idat.data(), idat.size()) != Z_OK ||
      n != raw.size()) {
    *why = "IDAT does not inflate to the image size";
    return img;
  }
  img.width = w;
  img.height = h;
  img.channels = ch;
  img.pixels.assign(stride * h, 0);
  for (uint32_t y = 0; y < h; y++) {
    const uint8_t f = raw[y * (stride + 1)];
    const uint8_t* in = &raw[y * (stride + 1) + 1];
    uint8_t* out = &img.pixels[y * stride];
    const uint8_t* up = y ? &img.pixels[(y - 1) * stride] : nullptr;
    for (size_t x = 0; x < stride; x++) {
      const int a = x >= (size_t)ch ? out[x - ch] : 0, b = up ? up[x] : 0,
                c = (up && x >= (size_t)ch) ? up[x - ch] : 0;
      int pred = 0;
      switch (f) {
        case 0: pred = 0; break;
        case 1: pred = a; break;
        case 2: pred = b; break;
        case 3: pred = (a + b) / 2; break;
        case 4: {
          const int p = a + b - c, pa = std::abs(p - a), pb = std::abs(p - b), pc = std::abs(p - c);
          pred = pa <= pb && pa <= pc ? a : pb <= pc ? b : c;
          break;
        }
        default: *why = "bad filter type " + std::to_string(f); return Image();
      }
      out[x] = (uint8_t)(in[x] + pred);
    }
  }
  return img;
}

// Pixels of exactly this colour in rows [y0, y1).
size_t count_color(const Image& img, uint32_t rgb, uint32_t y0, uint32_t y1) {
  size_t n = 0;
  for (uint32_t y = y0; y < y1 && y < img.height; y++)
    for (uint32_t x = 0; x < img.width; x++) {
      const uint8_t* p = img.at(x, y);
      if (p[0] == (rgb >> 16 & 255) && p[1] == (rgb >> 8 & 255) && p[2] == (rgb & 255)) n++;
    }
  return n;
}

constexpr uint32_t kTrainBlue = 0x1f77b4, kValRed = 0xd62728, kTokensGreen = 0x2ca02c;

// Checks report.png and report.svg in dir: a valid 1200x900 image with the
// loss curves in the upper panel and throughput in the lower one.
void expect_plots(const std::string& dir, bool has_val, bool smoothed) {
  const std::string png = read_file(dir + "/report.png");
  EXPECT_GT(png.size(), 8000u) << "a PNG of two plotted panels is tens of KB";
  std::string why;
  Image img = decode_png(png, &why);
  ASSERT_EQ(img.width, 1200u) << why;
  EXPECT_EQ(img.height, 900u);
  const uint32_t mid = img.height / 2;
  EXPECT_GT(count_color(img, kTrainBlue, 0, mid), 100u) << "train loss curve in the top panel";
  EXPECT_EQ(count_color(img, kTrainBlue, mid, img.height), 0u);
  if (has_val) {
    EXPECT_GT(count_color(img, kValRed, 0, mid), 100u) << "val loss curve in the top panel";
  }
  EXPECT_GT(count_color(img, kTokensGreen, mid, img.height), 50u)
      << "tokens/s curve in the bottom panel";
  EXPECT_EQ(count_color(img, kTokensGreen, 0, mid), 0u);

  const std::string svg = read_file(dir + "/report.svg");
  EXPECT_NE(svg.find("<svg"), std::string::npos);
  EXPECT_NE(svg.find("</svg>"), std::string::npos);
  size_t paths = 0;
  for (size_t p = svg.find("<path"); p != std::string::npos; p = svg.find("<path", p + 1)) paths++;
  EXPECT_GT(paths, 20u) << "axes, grid and curves are <path> elements";
  std::vector<std::string> titles = {"train loss", "tokens/s", "step"};
  if (has_val) titles.push_back("val loss");
  if (smoothed) titles.push_back("train loss (smoothed)");
  for (const auto& t : titles)
    EXPECT_NE(svg.find(">" + t), std::string::npos) << "SVG lacks the title '" << t << "'";
}

void expect_usage_error(const RunResult& r, const std::string& needle) {
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find(needle), std::string::npos) << "message lacks '" << needle << "':\n"
                                                      << r.output;
}

// One short real training run (Genesis 1-5, byte-level, a 2-layer model)
// shared by the tests.
class ReportCli : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new TempDir();
    auto r = run_shell("bible -f 'Gen1:1-Gen5:32' > " + (*dir_ / "gen.txt"));
    ASSERT_EQ(r.exit_code, 0) << "bible-kjv is installed by scripts/install-deps.sh\n"
                              << r.output;
    r = run_ratchet("shard --tokenizer byte --input " + (*dir_ / "gen.txt") + " --output-dir " +
                    (*dir_ / "data") + " --val-fraction 0.1 --seed 1");
    ASSERT_EQ(r.exit_code, 0) << r.output;
    // --run-dir: the trainer writes RUN_DIR/train.jsonl and RUN_DIR/ledger.json
    r = run_ratchet("train --model custom --layers 2 --heads 2 --channels 64 --max-seq-len 64 "
                    "--seq-len 32 --batch-size 4 --threads 2 --train-data '" +
                    (*dir_ / "data/train_*.h5") + "' --val-data '" + (*dir_ / "data/val_*.h5") +
                    "' --steps 12 --eval-every 4 --eval-batches 2 --lr 3e-3 --quiet "
                    "--run-dir " + (*dir_ / "run"));
    ASSERT_EQ(r.exit_code, 0) << r.output;
  }
  static void TearDownTestSuite() { delete dir_; }
  static TempDir* dir_;
};
TempDir* ReportCli::dir_ = nullptr;

TEST_F(ReportCli, RealRunGivesSummaryPngAndSvg) {
  const std::string run = *dir_ / "run";
  auto r = run_ratchet("report " + run);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  for (const char* s : {"steps:       1..12 (12 logged)", "train loss:", "val loss:    final",
                        "(4 evaluations)", "tokens/s", "ledger.json", "tokens", "report.png",
                        "report.svg"})
    EXPECT_NE(r.output.find(s), std::string::npos) << "missing '" << s << "':\n" << r.output;
  EXPECT_EQ(r.output.find("disagree"), std::string::npos) << r.output;  // the trainer's own pair
  expect_plots(run, /*has_val=*/true, /*smoothed=*/false);

  // --json: one object with the same figures
  r = run_ratchet("report " + run + " --json --no-plot");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const nlohmann::json o = nlohmann::json::parse(r.output);
  ASSERT_TRUE(o.contains("steps")) << r.output;
  EXPECT_EQ(o["steps"], 12);
  EXPECT_EQ(o["evals"], 4);
  EXPECT_GT(o["mean_tokens_per_s"].get<double>(), 0);
  EXPECT_LT(o["best_val_loss"].get<double>(), 5.6);  // below ln(257)
  ASSERT_TRUE(o["ledger"].is_object()) << r.output;
  EXPECT_EQ(o["ledger"]["max_step"], 12);
}

// A log as a requeued run leaves it: steps 41-60 logged twice (the run was
// preempted at 60 and resumed from its checkpoint at 40), a torn last line,
// and the ledger next to it.
TEST(ReportSynthetic, ReplayedStepsTornLineAndLedger) {
  TempDir d;
  std::string log;
  auto step = [&](int s, double loss, double tok_s) {
    log += "{\"step\": " + std::to_string(s) + ", \"loss\": " + std::to_string(loss) +
           ", \"lr\": 0.001, \"grad_norm\": 1.0, \"step_ms\": " + std::to_string(2048e3 / tok_s) +
           ", \"tokens_per_s\": " + std::to_string(tok_s) + ", \"gflops\": 2.0}\n";
  };
  log += "{\"step\": 0, \"val_loss\": 5.5}\n";
  for (int s = 1; s <= 60; s++) step(s, 5.0 - 0.02 * s + 0.3 * (s % 3), 1000);
  for (int s = 41; s <= 120; s++) step(s, 4.0 - 0.01 * s + 0.3 * (s % 3), 4000);
  for (int s = 25; s <= 120; s += 25) log += "{\"step\": " + std::to_string(s) + ", \"val_loss\": " +
                                             std::to_string(4.5 - 0.01 * s) + "}\n";
  log += "{\"step\": 120, \"val_loss\": 3.1}\n";
  log += "{\"step\": 121, \"loss\": 2.9, \"lr";  // killed mid-write
  write_file(d / "metrics.jsonl", log);  // not train.jsonl: the only .jsonl is used
  write_file(d / "ledger.json",
             "{\"wall_hours\": 0.25, \"device_hours\": 2.0, \"tokens\": 245760, \"cost\": 6.5,"
             " \"preemptions\": 1, \"requeues\": 1, \"steps_lost\": 20, \"device\": \"h100\"}\n");
  auto r = run_ratchet("report " + d.path);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  for (const char* s : {"1..120 (120 logged; 20 replayed", "best 3.1 at step 120",
                        "(6 evaluations)", "preemptions", "steps_lost", "20", "h100", "6.5"})
    EXPECT_NE(r.output.find(s), std::string::npos) << "missing '" << s << "':\n" << r.output;
  expect_plots(d.path, /*has_val=*/true, /*smoothed=*/true);

  r = run_ratchet("report " + d.path + " --json --no-plot");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  // The torn last line is skipped with a warning (on stderr, captured here too).
  const size_t w = r.output.find("skipping its torn last line 147");
  ASSERT_NE(w, std::string::npos) << r.output;
  const size_t bol = r.output.rfind('\n', w);
  const size_t from = bol == std::string::npos ? 0 : bol + 1;
  r.output.erase(from, r.output.find('\n', w) + 1 - from);
  const ratchet::OrderedJson o = ratchet::OrderedJson::parse(r.output);
  EXPECT_EQ(o["replayed_steps"], 20);
  // steps 2..40 at 1000 tokens/s, 41..120 (the replays win) at 4000: time-weighted,
  // (39 + 80) · 2048 tokens over 39 · 2.048 + 80 · 0.512 s = 243712 / 120.832 s
  EXPECT_NEAR(o["mean_tokens_per_s"].get<double>(), 243712 / 120.832, 0.01);
  // The ledger as it was, members in file order.
  ASSERT_TRUE(o["ledger"].is_object()) << r.output;
  EXPECT_EQ(o["ledger"].begin().key(), "wall_hours") << r.output;
  EXPECT_EQ(o["ledger"]["wall_hours"], 0.25);
  EXPECT_EQ(o["ledger"]["device"], "h100");
}

TEST(ReportSynthetic, LogWithoutValidation) {
  TempDir d;
  write_file(d / "train.jsonl",
             "{\"step\": 1, \"loss\": 5.0, \"step_ms\": 10, \"tokens_per_s\": 100}\n"
             "{\"step\": 2, \"loss\": 4.0, \"step_ms\": 10, \"tokens_per_s\": 120}\n"
             "{\"step\": 3, \"loss\": 3.5, \"step_ms\": 10, \"tokens_per_s\": 110}\n");
  write_file(d / "other.jsonl", "{}\n");  // train.jsonl wins over other logs
  auto r = run_ratchet("report " + d.path);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("val loss:    none"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("ledger:      none"), std::string::npos) << r.output;
  EXPECT_NE(read_file(d / "report.svg").find(">train loss"), std::string::npos);
}

// A run directory holds suspect_nodes.jsonl after a hang, a straggler or a
// dead rank (docs/resilience.md): the training log is still the other one.
TEST(ReportRunDir, TheSuspectNodesFileIsNotTakenForTheTrainingLog) {
  TempDir d;
  write_file(d / "metrics.jsonl",
             "{\"step\": 1, \"loss\": 5.0, \"step_ms\": 10, \"tokens_per_s\": 100}\n"
             "{\"step\": 2, \"loss\": 4.0, \"step_ms\": 10, \"tokens_per_s\": 120}\n");
  write_file(d / "suspect_nodes.jsonl",
             "{\"node\": \"n2\", \"rank\": 1, \"cause\": \"dead\", \"job_id\": \"4\", \"time\": 1, \"detail\": \"x\"}\n");
  auto r = run_ratchet("report " + d.path);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("metrics.jsonl"), std::string::npos) << r.output;
}

TEST(ReportErrors, BadInputsAreNamed) {
  TempDir d;
  expect_usage_error(run_ratchet("report " + (d / "nope")), "does not exist");
  expect_usage_error(run_ratchet("report " + d.path), "no training log");
  expect_usage_error(run_ratchet("report"), "run directory");
  write_file(d / "train.jsonl", "");
  expect_usage_error(run_ratchet("report " + d.path), "is empty");
  write_file(d / "train.jsonl", "{\"step\": 1, \"loss\": 2}\nnot json\n{\"step\": 2, \"loss\": 1}\n");
  expect_usage_error(run_ratchet("report " + d.path), "line 2");
  write_file(d / "train.jsonl", "{\"step\": 1, \"loss\": 2, \"step_ms\": 5, \"tokens_per_s\": 9}\n");
  auto r = run_ratchet("report " + d.path + " --gnuplot /nonexistent/gnuplot");
  expect_usage_error(r, "gnuplot-nox");
  write_file(d / "ledger.json", "[1, 2]");
  expect_usage_error(run_ratchet("report " + d.path + " --no-plot"), "ledger");

  TempDir two;
  write_file(two / "a.jsonl", "{}\n");
  write_file(two / "b.jsonl", "{}\n");
  expect_usage_error(run_ratchet("report " + two.path), "--log");

  r = run_ratchet("report --help");
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_NE(r.output.find("examples:"), std::string::npos);
  EXPECT_NE(r.output.find("gnuplot-nox"), std::string::npos);
}

// Issue 25, item 12: a log and a ledger of different runs are named, not
// paired silently; a complete line of another kind is not "torn".
std::string step_lines(int from, int to, double tokens_per_step) {
  std::string log;
  for (int s = from; s <= to; s++)
    log += "{\"step\": " + std::to_string(s) + ", \"loss\": 3.0, \"step_ms\": 10, \"tokens_per_s\": " +
           std::to_string(tokens_per_step * 100) + "}\n";
  return log;
}

TEST(ReportSynthetic, ALogAndALedgerThatDisagreeAreNamed) {
  TempDir d;
  const std::string ledger30 =
      "{\"tokens\": 1920, \"steps_lost\": 0, \"max_step\": 30, \"state\": 1, \"device_hours\": 0.1}\n";
  write_file(d / "train.jsonl", step_lines(1, 5, 64));
  write_file(d / "ledger.json", ledger30);
  auto r = run_ratchet("report " + d.path + " --no-plot");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("disagree"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("the log ends at step 5 but the ledger's max_step is 30"), std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("WARNING: disagrees with the log"), std::string::npos) << r.output;
  r = run_shell("{ " RATCHET_EXE " report " + d.path + " --no-plot --json 2>/dev/null; }");  // stdout only
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto o = nlohmann::json::parse(r.output);
  ASSERT_TRUE(o.contains("ledger_disagrees")) << r.output;
  EXPECT_EQ(o["ledger_disagrees"].size(), 1u) << r.output;

  // The same steps, another batch: 64 tokens a step in the log, 128 in the ledger.
  write_file(d / "train.jsonl", step_lines(1, 30, 64));
  write_file(d / "ledger.json",
             "{\"tokens\": 3840, \"steps_lost\": 0, \"max_step\": 30, \"state\": 1}\n");
  r = run_ratchet("report " + d.path + " --no-plot");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("the log trains 64 tokens per step but the ledger counts 128"),
            std::string::npos) << r.output;

  // A killed run: the ledger (written at most once a second) may trail the log,
  // and replayed steps are in steps_lost: no warning.
  write_file(d / "train.jsonl", step_lines(1, 30, 64) + step_lines(21, 34, 64));
  write_file(d / "ledger.json",
             "{\"tokens\": 3008, \"steps_lost\": 10, \"max_step\": 37, \"state\": 0}\n");
  r = run_ratchet("report " + d.path + " --no-plot");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("the log ends at step 34 but the ledger's max_step is 37"), std::string::npos)
      << r.output;  // ahead of the log: the log lost lines
  write_file(d / "ledger.json",
             "{\"tokens\": 2560, \"steps_lost\": 10, \"max_step\": 30, \"state\": 0}\n");
  r = run_ratchet("report " + d.path + " --no-plot");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(r.output.find("disagree"), std::string::npos) << r.output;
}

TEST(ReportSynthetic, OnlyAnIncompleteLastLineIsTorn) {
  TempDir d;
  const std::string good = step_lines(1, 3, 64);
  // A complete JSON array: not torn, not the trainer's.
  write_file(d / "train.jsonl", good + "[1, 2]\n");
  auto r = run_ratchet("report " + d.path + " --no-plot");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_EQ(r.output.find("torn"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("line 4 is a JSON array, not an object"), std::string::npos) << r.output;
  write_file(d / "train.jsonl", good + "42");
  r = run_ratchet("report " + d.path + " --no-plot");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("line 4 is a JSON number"), std::string::npos) << r.output;
  // A syntax error before the end of the line: damage, not a cut (also
  // when the bad character is the line's last).
  write_file(d / "train.jsonl", good + "{\"step\": 4, \"loss\": 2.}");
  r = run_ratchet("report " + d.path + " --no-plot");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("line 4 is not a JSON object: "), std::string::npos) << r.output;
  write_file(d / "train.jsonl", good + "{\"step\": 4,, \"loss\": 1}\n");
  r = run_ratchet("report " + d.path + " --no-plot");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("line 4 is not a JSON object: "), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("torn"), std::string::npos) << r.output;
  // Steps that are no step numbers, and a directory as the log.
  write_file(d / "train.jsonl", good + "{\"step\": 1e999, \"loss\": 1}\n");  // threw out_of_range, exit 1
  r = run_ratchet("report " + d.path + " --no-plot");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("line 4 is not a JSON object"), std::string::npos) << r.output;
  for (const char* step : {"-5", "1e308", "2.5"}) {
    write_file(d / "train.jsonl", good + "{\"step\": " + step + ", \"loss\": 1}\n");
    r = run_ratchet("report " + d.path + " --no-plot");
    EXPECT_EQ(r.exit_code, 2) << step << "\n" << r.output;
    EXPECT_NE(r.output.find("line 4: step "), std::string::npos) << r.output;
  }
  r = run_ratchet("report " + d.path + " --log " + d.path + " --no-plot");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("is a directory"), std::string::npos) << r.output;
  // Cut off mid-record (in a number, a key, a string): torn, skipped.
  for (const char* cut : {"{\"step\": 4, \"loss\": 2.", "{\"step\": 4, \"lo", "{\"step\": 4"}) {
    write_file(d / "train.jsonl", good + cut);
    r = run_ratchet("report " + d.path + " --no-plot");
    EXPECT_EQ(r.exit_code, 0) << cut << "\n" << r.output;
    EXPECT_NE(r.output.find("skipping its torn last line 4"), std::string::npos) << cut << "\n" << r.output;
    EXPECT_NE(r.output.find("1..3 (3 logged)"), std::string::npos) << r.output;
  }
}

TEST(ReportSynthetic, SpendByTagSkipsNegativeSpendAndEscapesTags) {
  TempDir d;
  for (const char* run : {"a", "b", "c", "d"}) std::filesystem::create_directories(d / run);
  write_file(d / "a/ledger.json", "{\"device_hours\": 2.5, \"cost\": 5, \"tag.project\": \"llm\"}\n");
  write_file(d / "b/ledger.json", "{\"device_hours\": -100, \"cost\": 1, \"tag.project\": \"llm\"}\n");
  write_file(d / "c/ledger.json",
             "{\"device_hours\": 1, \"cost\": 2, \"tag.team\": \"\\u001b[31mred\\nline\"}\n");
  write_file(d / "d/ledger.json", "{\"device_hours\": \"lots\", \"cost\": 2}\n");
  std::filesystem::create_directories(d / "e");  // two of these summed to inf
  write_file(d / "e/ledger.json", "{\"device_hours\": 1, \"cost\": 1e308}\n");
  auto r = run_ratchet("report " + d.path + " --by-tag");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("ledger " + (d / "b/ledger.json") + " skipped: device_hours -100"),
            std::string::npos) << r.output;
  EXPECT_NE(r.output.find("ledger " + (d / "d/ledger.json") + " skipped: device_hours \"lots\""),
            std::string::npos) << r.output;
  EXPECT_NE(r.output.find("ledger " + (d / "e/ledger.json") + " skipped: cost 1e+308"),
            std::string::npos) << r.output;
  EXPECT_NE(r.output.find("(3 ledgers skipped"), std::string::npos) << r.output;
  // The sums: a and c only.
  EXPECT_NE(r.output.find("project=llm"), std::string::npos);
  EXPECT_NE(r.output.find("     1       2.500000       5.0000"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("     2       3.500000       7.0000"), std::string::npos) << r.output;
  // No raw escape or newline from the tag reaches the terminal.
  EXPECT_EQ(r.output.find('\x1b'), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("team=\\x1b[31mred\\x0aline"), std::string::npos) << r.output;
  // Nothing countable: refused, naming why.
  TempDir bad;
  write_file(bad / "ledger.json", "{\"device_hours\": -1}\n");
  r = run_ratchet("report " + bad.path + " --by-tag");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("can be counted"), std::string::npos) << r.output;
}

TEST(ReportSynthetic, TrainRefusesControlCharactersInTags) {
  // (printf: the test shell is sh, without $'...')
  for (const char* tag : {"k=a\\nb", "k\\033[31m=v", "k=v\\tx", "k=\\177"}) {
    auto r = run_ratchet(std::string("train --tag \"$(printf '") + tag +
                         "')\" --train-data /nonexistent --steps 1");
    EXPECT_EQ(r.exit_code, 2) << tag << "\n" << r.output;
    EXPECT_NE(r.output.find("--tag holds a control character"), std::string::npos) << tag << "\n" << r.output;
  }
}

// Issue 25, item 15: a node without gnuplot gets the summary and a warning.
TEST(ReportSynthetic, WithoutGnuplotTheSummaryIsStillWritten) {
  TempDir d;
  write_file(d / "train.jsonl", step_lines(1, 3, 64));
  std::filesystem::create_directories(d / "bin");  // PATH: no gnuplot there
  auto r = run_shell("PATH=" + (d / "bin") + " " RATCHET_EXE " report " + d.path);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("steps:       1..3 (3 logged)"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("warning: plots skipped: gnuplot not found"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("gnuplot-nox"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("plots:"), std::string::npos) << r.output;
  EXPECT_FALSE(std::filesystem::exists(d / "report.png"));
  r = run_shell("{ PATH=" + (d / "bin") + " " RATCHET_EXE " report " + d.path + " --json 2>/dev/null; }");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(nlohmann::json::parse(r.output)["plots_skipped"], "gnuplot not found");
  // --no-plot: no warning.
  r = run_shell("PATH=" + (d / "bin") + " " RATCHET_EXE " report " + d.path + " --no-plot");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(r.output.find("warning"), std::string::npos) << r.output;
}

}  // namespace
