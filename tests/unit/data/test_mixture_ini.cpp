// The [train-data] section of a `ratchet train --config` file
// (data/mixture_ini.h): GLOB = WEIGHT lines become mixture.h's GLOB:WEIGHT
// specs (parsed back by parse_source_specs to the same globs and weights),
// Boost reads the rest with the section's lines emptied (so the rest parses,
// line count unchanged), and every bad line is refused naming the file and
// its line.
#include <gtest/gtest.h>

#include <algorithm>
#include <boost/program_options.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "data/mixture.h"
#include "data/mixture_ini.h"
#include "testing/expect_error.h"
#include "testing/test_util.h"

using namespace ratchet;
using namespace ratchet::testing;
namespace po = boost::program_options;

namespace {

const std::vector<std::string> kOptions = {"steps", "lr", "train-data", "val-data"};

TrainDataSection read(const std::string& text) {
  return read_train_data_section(text, "run.ini", kOptions);
}

size_t count(const std::string& s, char c) { return (size_t)std::count(s.begin(), s.end(), c); }

TEST(MixtureIni, SectionLinesBecomeWeightedSpecs) {
  const std::string text =
      "steps = 50   # top of the file\n"
      "lr = 3e-4\n"
      "\n"
      "[train-data]   # GLOB = WEIGHT\n"
      "web/*.h5 = 0.7\n"
      "  # a comment line\n"
      "\tbooks/*.h5\t=\t0.3  # trailing comment\n"
      "run=3/x_*.h5 = 2\n"  // '=' in the glob: the line splits at its last '='
      "odd:5 = 1e-1\n"      // a glob ending in ':5' keeps it
      "crlf.h5 = 3\r\n";    // a Windows line end
  const TrainDataSection s = read(text);
  EXPECT_EQ(s.header_line, 4);
  EXPECT_EQ(s.key_line, 0);
  EXPECT_EQ(s.specs, (std::vector<std::string>{"web/*.h5:0.7", "books/*.h5:0.3", "run=3/x_*.h5:2",
                                                "odd:5:1e-1", "crlf.h5:3"}));
  EXPECT_EQ(s.lines, (std::vector<int>{5, 7, 8, 9, 10}));
  const std::vector<SourceSpec> p = parse_source_specs(s.specs, "--train-data");
  ASSERT_EQ(p.size(), 5u);
  EXPECT_EQ(p[0].pattern, "web/*.h5");
  EXPECT_EQ(p[0].weight, 0.7);
  EXPECT_EQ(p[1].pattern, "books/*.h5");
  EXPECT_EQ(p[1].weight, 0.3);
  EXPECT_EQ(p[2].pattern, "run=3/x_*.h5");
  EXPECT_EQ(p[2].weight, 2);
  EXPECT_EQ(p[3].pattern, "odd:5");
  EXPECT_EQ(p[3].weight, 0.1);
  // The same specs as the flags: the same recorded identity.
  EXPECT_EQ(sources_text(parse_source_specs({"web/*.h5:0.7", "books/*.h5:0.3"}, "--train-data")),
            sources_text(parse_source_specs({s.specs[0], s.specs[1]}, "--train-data")));
  // The rest keeps the top keys, drops the section, and has the file's line count.
  EXPECT_EQ(count(s.rest, '\n'), count(text, '\n'));
  EXPECT_EQ(s.rest.find("web/"), std::string::npos);
  EXPECT_EQ(s.rest.find("[train-data]"), std::string::npos);
  po::options_description desc;
  double lr = 0;
  int steps = 0;
  desc.add_options()("steps", po::value(&steps))("lr", po::value(&lr));
  po::variables_map vm;
  std::istringstream in(s.rest);
  po::store(po::parse_config_file(in, desc), vm);  // would throw on "train-data.web/*.h5"
  po::notify(vm);
  EXPECT_EQ(steps, 50);
  EXPECT_EQ(lr, 3e-4);
}

TEST(MixtureIni, AnotherSectionEndsItAndABomIsDropped) {
  const TrainDataSection s = read("\xEF\xBB\xBFsteps = 5\n[train-data]\na.h5 = 1\n[other]\nx = 2\n");
  EXPECT_EQ(s.specs, (std::vector<std::string>{"a.h5:1"}));
  EXPECT_EQ(s.rest, "steps = 5\n\n\n[other]\nx = 2\n");  // [other] is Boost's to refuse
  // No section: the text is Boost's as it was; top-level train-data lines are noted.
  const std::string plain = "train-data = a.h5:0.5\nsteps = 3";
  const TrainDataSection t = read(plain);
  EXPECT_EQ(t.rest, plain);
  EXPECT_EQ(t.header_line, 0);
  EXPECT_EQ(t.key_line, 1);
  EXPECT_TRUE(t.specs.empty());
}

TEST(MixtureIni, BadLinesAreRefusedNamingFileAndLine) {
  struct Case {
    std::string text;
    std::vector<std::string> says;
  };
  const std::vector<Case> cases = {
      {"[train-data]\nweb/*.h5\n", {"run.ini line 2", "'web/*.h5'", "GLOB = WEIGHT"}},
      {"[train-data]\n = 0.5\n", {"run.ini line 2", "no glob"}},
      {"[train-data]\na.h5 =\n", {"run.ini line 2", "'a.h5'", "weight ''", "positive finite"}},
      {"\n[train-data]\na.h5 = 0\n", {"run.ini line 3", "weight '0'", "positive finite"}},
      {"[train-data]\na.h5 = -1\n", {"line 2", "weight '-1'"}},
      {"[train-data]\na.h5 = nan\n", {"line 2", "weight 'nan'"}},
      {"[train-data]\na.h5 = inf\n", {"line 2", "weight 'inf'"}},
      {"[train-data]\na.h5 = 0.5x\n", {"line 2", "weight '0.5x'"}},
      {"[train-data]\na.h5 = 0.5:2\n", {"line 2", "weight '0.5:2'"}},
      {"[train-data]\na.h5 = 1\nb.h5 = 1\na.h5 = 2\n", {"run.ini line 4", "'a.h5' a second time",
                                                       "first on line 2"}},
      {"[train-data]\na.h5 = 1\nsteps = 50\n", {"run.ini line 3", "'steps' is a `ratchet train` option",
                                               "end of the file"}},
      {"steps = 1\n[train-data]\n# nothing yet\n", {"run.ini line 2", "lists no source"}},
      {"train-data = a.h5:1\n[train-data]\nb.h5 = 1\n", {"run.ini", "line 1", "line 2", "one of the two"}},
      {"[train-data]\na.h5 = 1e308\nb.h5 = 1e308\n", {"run.ini", "sum to inf"}},
      {"[train-data]\na\x01.h5 = 1\n", {"run.ini line 2", "control character"}},
      {"[train-data]\na\xff.h5 = 1\n", {"run.ini line 2", "not valid UTF-8"}},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.text);
    expect_error([&] { read(c.text); }, c.says);
  }
}

TEST(MixtureIni, GlobsMustMatchAFileNamingTheLine) {
  TempDir d;
  write_file(d / "a_0.h5", "x");
  const TrainDataSection s =
      read("[train-data]\n" + (d / "a_*.h5") + " = 1\n\n" + (d / "none_*.h5") + " = 1\n");
  expect_error([&] { check_train_data_section_globs(s, "run.ini"); },
               {"run.ini line 4", d / "none_*.h5", "matches no file"});
  const TrainDataSection ok = read("[train-data]\n" + (d / "a_*.h5") + " = 1\n");
  check_train_data_section_globs(ok, "run.ini");  // no throw
}

}  // namespace
