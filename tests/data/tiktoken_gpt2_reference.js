// A second independent GPT-2 tokenizer: OpenAI's tiktoken (Rust compiled to
// WASM, npm `tiktoken`, installed by scripts/install-deps.sh), encoding "gpt2".
// Its pre-tokenizer's \s is Unicode's White_Space, as in OpenAI's Python
// encoder and HF tokenizers, where npm gpt-3-encoder has JavaScript's \s.
//   node tiktoken_gpt2_reference.js NODE_MODULES INPUT.json
// INPUT.json is an array of strings; prints one line per string: its token
// ids separated by spaces.
'use strict';
const fs = require('fs');
const path = require('path');
const { get_encoding } = require(path.resolve(process.argv[2], 'tiktoken'));
const enc = get_encoding('gpt2');
const input = JSON.parse(fs.readFileSync(process.argv[3], 'utf8'));
// disallowed_special = [] : "<|endoftext|>" in text is text, as in ratchet.
const out = input.map(s => Array.from(enc.encode(s, [], [])).join(' '));
enc.free();
process.stdout.write(out.join('\n') + '\n');
