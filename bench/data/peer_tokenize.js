// The reference peers of bench/data/tokenizer_compare.sh, timed on one text:
//   node peer_tokenize.js hf TOKENIZER_JSON TEXT    Hugging Face `tokenizers`
//        (Rust, Node binding), encodeBatch of 1000 lines at a time
//   node peer_tokenize.js tiktoken ENCODING TEXT    OpenAI's tiktoken (npm, WASM),
//        one encode per 1000 lines (its fastest way here: a call per line
//        spends most of its time crossing into WASM)
// Prints one line: "<bytes> <tokens> <seconds>" (seconds of encoding only:
// loading the tokenizer and reading the text are left out, in the peers'
// favour). Lines keep their '\n', so every byte is encoded.
// Modules from $RATCHET_NODE_MODULES or /usr/local/share/ratchet/node/node_modules
// (scripts/install-deps.sh). One thread: RAYON_NUM_THREADS=1 (set by the caller).
'use strict';
const fs = require('fs');
const path = require('path');
const modules = process.env.RATCHET_NODE_MODULES || '/usr/local/share/ratchet/node/node_modules';
const [kind, what, file] = process.argv.slice(2);
if (!['hf', 'tiktoken'].includes(kind) || !what || !file) {
  process.stderr.write('usage: node peer_tokenize.js hf|tiktoken TOKENIZER_JSON|ENCODING TEXT\n');
  process.exit(2);
}
const buf = fs.readFileSync(file);
const lines = buf.toString('utf8').split(/(?<=\n)/);

async function main() {
  let tokens = 0, t0, t1;
  if (kind === 'hf') {
    const { Tokenizer } = require(path.join(modules, 'tokenizers'));
    const tok = Tokenizer.fromFile(what);
    t0 = process.hrtime.bigint();
    for (let i = 0; i < lines.length; i += 1000) {
      const encs = await tok.encodeBatch(lines.slice(i, i + 1000), { addSpecialTokens: false });
      for (const e of encs) tokens += e.getIds().length;
    }
    t1 = process.hrtime.bigint();
  } else {
    const { get_encoding } = require(path.join(modules, 'tiktoken'));
    const enc = get_encoding(what);
    t0 = process.hrtime.bigint();
    for (let i = 0; i < lines.length; i += 1000)
      tokens += enc.encode(lines.slice(i, i + 1000).join(''), [], []).length;
    t1 = process.hrtime.bigint();
    enc.free();
  }
  console.log(`${buf.length} ${tokens} ${Number(t1 - t0) / 1e9}`);
}
main().catch(e => { process.stderr.write(`peer_tokenize.js: ${e.stack || e}\n`); process.exit(1); });
