// A weighted mixture as an INI section (issue 29, item 6): in the file given
// to `ratchet train --config`,
//
//   steps = 1000
//   [train-data]          # GLOB = WEIGHT, one line per source
//   web/*.h5   = 0.7
//   books/*.h5 = 0.3
//
// is the run of --train-data 'web/*.h5:0.7' --train-data 'books/*.h5:0.3'
// (the same specs, so the same draw, identity and checkpoints).
//
// Boost.Program_options reads the rest of the file. It cannot read this
// section itself: its keys would become options named "train-data.web/*.h5",
// and it names no line in its errors. So the section's lines are taken out
// here first (left empty in `rest`, which Boost then reads) and checked with
// the file and line in every error.
//
// The section's rules, as Boost reads the rest of the file: '#' starts a
// comment anywhere on a line; blank lines are skipped; a later [section]
// line ends it. A line splits at its LAST '=' (a glob may hold '='; the
// weight never does), so every line needs a weight. A line whose glob is a
// `ratchet train` option name (`steps = 50`) was meant for the top of the
// file: INI keys after a [section] line belong to that section, and it is
// refused saying so. Globs are read from the working directory, as
// --train-data's are.
//
// One file uses one form: top-level `train-data = ...` lines and a
// [train-data] section together are refused. Where the sources then go is
// the caller's rule (cmd_train: --train-data on the command line replaces
// the file's sources, whichever form, like any option given on both).
#pragma once
#include <string>
#include <vector>

namespace ratchet {

struct TrainDataSection {
  std::vector<std::string> specs;  // "GLOB:WEIGHT" (mixture.h's spec form), in file order
  std::vector<std::string> globs;  // each spec's glob
  std::vector<int> lines;          // each spec's line in the file (1-based)
  int header_line = 0;             // the first [train-data] line; 0: the file has none
  int key_line = 0;                // the first top-level `train-data = ` line; 0: none
  std::string rest;                // the text without the section (its lines left empty) or a BOM
};

// Reads the section out of an INI file's text. `path` names the file in
// errors; `option_names` are `ratchet train`'s long option names. Throws
// Error ("PATH line N: ...") on a line that is not GLOB = WEIGHT, an empty
// glob, a weight that is not a positive finite number, a glob given twice,
// a glob that is an option name, a section with no source, weights whose sum
// overflows, or both forms in one file.
TrainDataSection read_train_data_section(const std::string& text, const std::string& path,
                                         const std::vector<std::string>& option_names);

// Each glob of the section matches at least one file (glob(3), from the
// working directory). Throws Error naming the file, the line and the glob.
void check_train_data_section_globs(const TrainDataSection& s, const std::string& path);

}  // namespace ratchet
