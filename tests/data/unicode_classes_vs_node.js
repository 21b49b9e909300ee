// Compares ratchet's pinned code-point classes (src/tokenizer/unicode_classes.inc,
// as the C++ char_class() returns them) with node's regex engine, on the code
// points that both the pinned Unicode version and node's own assign: a code
// point one of them does not know yet is class 0 there by definition, so it
// says nothing about the table.
//
// Two code points differ by design: ratchet's \s is Unicode's White_Space
// (OpenAI's Python encoder, tiktoken and HF tokenizers), JavaScript's is not:
// U+0085 is White_Space but not JavaScript's \s, U+FEFF the reverse (issue 29).
// They are expected to differ, in exactly that way, and are not counted.
//
//   node unicode_classes_vs_node.js CLASSES ASSIGNED VERSION
// CLASSES: 0x110000 bytes, byte cp = char_class(cp) (0 other, 1 \p{L}, 2 \p{N}, 3 \s).
// ASSIGNED: 0x110000 bytes, 1 where the pinned version assigns cp (ratchet's
// general-category table, unicode_tables.h); VERSION: that version, for the
// summary line.
// Prints one summary line; exits 1 and lists mismatches when any.
'use strict';
const fs = require('fs');
const [classesPath, assignedPath, version] = process.argv.slice(2);
const ours = fs.readFileSync(classesPath);
if (ours.length !== 0x110000) throw new Error(`${classesPath}: ${ours.length} bytes, want 0x110000`);
const pinned = fs.readFileSync(assignedPath);  // 1 = assigned in the pinned version
if (pinned.length !== 0x110000) throw new Error(`${assignedPath}: ${pinned.length} bytes, want 0x110000`);

// cp -> [ours, node's]
const DELIBERATE = new Map([[0x85, [3, 0]], [0xFEFF, [0, 3]]]);

const L = /^\p{L}$/u, N = /^\p{N}$/u, S = /^\s$/u, Cn = /^\p{Cn}$/u;
let compared = 0, onlyPinned = 0, onlyNode = 0;
const bad = [];
for (let cp = 0; cp < 0x110000; cp++) {
  if (cp >= 0xD800 && cp <= 0xDFFF) continue;  // surrogates: not valid UTF-8
  const s = String.fromCodePoint(cp);
  const nodeAssigned = !Cn.test(s);
  if (!pinned[cp] || !nodeAssigned) {
    if (pinned[cp]) onlyPinned++;
    else if (nodeAssigned) onlyNode++;
    continue;
  }
  compared++;
  const theirs = L.test(s) ? 1 : N.test(s) ? 2 : S.test(s) ? 3 : 0;
  const hex = `U+${cp.toString(16).toUpperCase().padStart(4, '0')}`;
  const want = DELIBERATE.get(cp);
  if (want) {
    if (ours[cp] !== want[0] || theirs !== want[1])
      bad.push(`${hex}: ours ${ours[cp]}, node ${theirs}; expected the deliberate ${want[0]} vs ${want[1]}`);
    continue;
  }
  if (theirs !== ours[cp]) bad.push(`${hex}: ours ${ours[cp]}, node ${theirs}`);
}
console.log(`pinned Unicode ${version} vs node ${process.version} (Unicode ${process.versions.unicode}): ` +
            `${compared} code points compared, ${bad.length} differ ` +
            `(besides the deliberate U+0085 and U+FEFF); ` +
            `${onlyNode} assigned only in node's, ${onlyPinned} only in the pinned version`);
if (bad.length) {
  console.log(bad.slice(0, 40).join('\n'));
  process.exit(1);
}
