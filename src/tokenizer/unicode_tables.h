// The Unicode data of the tokenizers, from the checked-in tables that
// gen_unicode_tables.mjs generates from the npm packages install-deps.sh pins
// (docs/tokenizers-unicode.md): general categories of the pre-tokenizers'
// Unicode version (Hugging Face's regex classes, 16.0), and which code points
// the normalization data's version (Hugging Face's NFC/NFKC, 9.0) assigns.
// char_class() (gpt2_pretokenize.h) is the splitters' fast view of the first.
#pragma once
#include <cstdint>
#include <string_view>
#include <utility>
#include <vector>

namespace ratchet {

using CodePointRanges = std::vector<std::pair<uint32_t, uint32_t>>;  // [first, last], sorted

// The code points of a general-category class as a regex names it in \p{..}
// (Oniguruma's loose matching: case, spaces, '_' and '-' ignored): a short
// name (L, Lu, LC or L&, ...), a long one (Letter, Uppercase_Letter,
// Cased_Letter, ...), or Any, Assigned. False when the name is none of these
// (a script, a binary property: left to the regex engine).
bool general_category_ranges(std::string_view name, CodePointRanges* out);

// Unicode's White_Space property (the \s of Hugging Face's regexes).
const CodePointRanges& white_space_ranges();

// The ranges not in `r` (over U+0000..U+10FFFF).
CodePointRanges complement(const CodePointRanges& r);

// Whether the normalization data's Unicode version assigns `cp` (any general
// category but Cn): the others have no decomposition, combining class 0 and
// compose with nothing, as in Hugging Face's NFC/NFKC/NFD/NFKD.
bool assigned_for_normalization(uint32_t cp);

}  // namespace ratchet
