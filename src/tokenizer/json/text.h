// UTF-8 text as the tokenizer.json engine carries it between stages.
//
// The Rust `tokenizers` library works on valid UTF-8 only. ratchet reads
// arbitrary bytes, so before any stage runs, every byte that is not part of
// a valid UTF-8 sequence is "escaped" into the lone surrogate U+DC00+byte
// (Python's surrogateescape), written as its 3-byte generalized UTF-8 form
// ED B2..B3 xx. Valid UTF-8 never holds a surrogate, so the mapping is
// one-to-one and text without invalid bytes is left untouched (no copy).
//   - regexes (PCRE2 needs valid UTF-8) see each escape as U+FFFD, a symbol
//     (class "other"): regex_view() swaps the 3 bytes for EF BF BD, same length,
//     so match offsets apply to the escaped text unchanged;
//   - normalizers leave escapes as they are (NFC etc. run between them);
//   - ByteLevel turns an escape back into its byte, so byte-level families
//     round-trip any input; BPE with byte_fallback emits that byte's <0xXX>.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>

namespace ratchet::hf {

// Decodes one code point at s[i] of escaped text (lone surrogates allowed):
// sets *cp and returns its length; a malformed sequence (not produced by
// escape_invalid) returns 1 with *cp = 0xFFFD.
int next_cp(std::string_view s, size_t i, uint32_t* cp);
void append_utf8(std::string& out, uint32_t cp);

// The escaped form of `text`; false (and *out untouched) when `text` is
// valid UTF-8 already, the common case.
bool escape_invalid(std::string_view text, std::string* out);

inline bool is_escape(uint32_t cp) { return cp >= 0xDC80 && cp <= 0xDCFF; }
inline uint8_t escaped_byte(uint32_t cp) { return (uint8_t)(cp - 0xDC00); }

// True when `s` holds an escape (ED followed by A0..BF).
bool has_escape(std::string_view s);
// `s` with every escape replaced by U+FFFD (same byte length), for PCRE2.
std::string regex_view(std::string_view s);

}  // namespace ratchet::hf
