// The reference peer for ratchet's tokenizer.json engine: Hugging Face's own
// `tokenizers` library (Rust, as its Node binding), npm-installed by
// scripts/install-deps.sh into /usr/local/share/ratchet/node/node_modules.
//
//   node hf_tokenizers_ref.js encode TOKENIZER_JSON [--add-special] [--split-special] < IN > OUT
//   node hf_tokenizers_ref.js decode TOKENIZER_JSON [--skip-special] < IN > OUT
//
// encode: each input line is one text as base64 (so any bytes can be
//   carried); each output line is a JSON array of its ids.
//   --add-special   addSpecialTokens: true (the post-processor's BOS/EOS)
//   --split-special text that spells a special token is encoded as text:
//                   the special added tokens are dropped from the loaded
//                   tokenizer.json's added_tokens before loading (what the
//                   Rust library's encode_special_tokens does; the binding
//                   has no switch for it). Without it, special tokens in the
//                   text are matched, as Hugging Face always does.
// decode: each input line is a JSON array of ids; each output line is the
//   decoded text's UTF-8 as base64.
//
// Invalid UTF-8: a JavaScript string cannot hold it. The bytes are turned into
// a string by Buffer.toString('utf8'), which replaces each maximal invalid
// subsequence by U+FFFD (the WHATWG decoder), and that string is encoded.
//
// The module directory is $RATCHET_NODE_MODULES or the install-deps default.
// Rayon (the library's thread pool) is held to one thread: tests run beside
// other work on small machines.
'use strict';
process.env.RAYON_NUM_THREADS = process.env.RAYON_NUM_THREADS || '1';
process.env.TOKENIZERS_PARALLELISM = 'false';
const fs = require('fs');
const path = require('path');
const readline = require('readline');

const modules = process.env.RATCHET_NODE_MODULES || '/usr/local/share/ratchet/node/node_modules';
const usage = 'usage: node hf_tokenizers_ref.js encode|decode TOKENIZER_JSON ' +
  '[--add-special] [--split-special] [--skip-special]';

function die(msg) {
  process.stderr.write(`hf_tokenizers_ref.js: ${msg}\n`);
  process.exit(2);
}

const [mode, file, ...flags] = process.argv.slice(2);
if (!['encode', 'decode'].includes(mode) || !file) die(usage);
for (const f of flags)
  if (!['--add-special', '--split-special', '--skip-special'].includes(f)) die(`unknown flag ${f}; ${usage}`);
let Tokenizer;
try {
  ({ Tokenizer } = require(path.join(modules, 'tokenizers')));
} catch (e) {
  die(`cannot load the tokenizers package from ${modules} (${e.message}): run scripts/install-deps.sh`);
}

function load() {
  if (!flags.includes('--split-special')) return Tokenizer.fromFile(file);
  const j = JSON.parse(fs.readFileSync(file, 'utf8'));
  j.added_tokens = (j.added_tokens || []).filter((t) => !t.special);
  return Tokenizer.fromString(JSON.stringify(j));
}

async function main() {
  const tok = load();
  const rl = readline.createInterface({ input: process.stdin, crlfDelay: Infinity });
  const out = [];
  const flush = () => {
    if (out.length) process.stdout.write(out.join('\n') + '\n');
    out.length = 0;
  };
  // Texts are encoded 1024 at a time through encodeBatch (the same ids as
  // one encode each, and about twice as fast: the code-point sweeps send
  // hundreds of thousands).
  const pending = [];
  const encodePending = async () => {
    if (!pending.length) return;
    const encs = await tok.encodeBatch(pending, { addSpecialTokens: flags.includes('--add-special') });
    for (const enc of encs) out.push(JSON.stringify(enc.getIds()));
    pending.length = 0;
  };
  for await (const line of rl) {
    if (mode === 'encode') {
      pending.push(Buffer.from(line, 'base64').toString('utf8'));
      if (pending.length >= 1024) await encodePending();
    } else {
      const ids = JSON.parse(line);
      const text = await tok.decode(ids, flags.includes('--skip-special'));
      out.push(Buffer.from(text, 'utf8').toString('base64'));
    }
    if (out.length >= 256) flush();
  }
  await encodePending();
  flush();
}

main().catch((e) => die(e.stack || String(e)));
