// Loads a model directory the way a user of Hugging Face Transformers does,
// with AutoTokenizer.from_pretrained (transformers.js, npm's
// @huggingface/transformers, installed by scripts/install-deps.sh into
// /usr/local/share/ratchet/node/node_modules), and encodes texts with it:
// the check that `ratchet train --export-hf` writes a directory AutoTokenizer
// loads (tests/integration/test_export_autotokenizer.cpp).
//
//   node transformers_js_autotokenizer.js MODEL_DIR < IN > OUT
//
// Local files only (nothing is fetched). Each input line is one text as
// base64; each output line is a JSON array of its ids, encoded as
// `tokenizer.encode(text)` does by default (add_special_tokens: the
// tokenizer's BOS/EOS as tokenizer_config.json and the post-processor say).
// The first output line is a JSON object describing what was loaded
// (the tokenizer's class, bos/eos tokens), for the test's messages.
//
// AutoModelForCausalLM is not run here: transformers.js runs models through
// ONNX Runtime and loads only ONNX weights, not model.safetensors.
//
// The module directory is $RATCHET_NODE_MODULES or the install-deps default.
'use strict';
const fs = require('fs');
const path = require('path');
const readline = require('readline');

const modules = process.env.RATCHET_NODE_MODULES || '/usr/local/share/ratchet/node/node_modules';

function die(msg, code) {
  process.stderr.write(`transformers_js_autotokenizer.js: ${msg}\n`);
  process.exit(code);
}

async function main() {
  const dir = process.argv[2];
  if (!dir || process.argv.length !== 3) die('usage: node transformers_js_autotokenizer.js MODEL_DIR < IN', 2);
  if (!fs.existsSync(path.join(dir, 'tokenizer.json'))) die(`${dir} has no tokenizer.json`, 1);
  const pkg = path.join(modules, '@huggingface/transformers');
  if (!fs.existsSync(path.join(pkg, 'package.json')))
    die(`${pkg} is not installed: run scripts/install-deps.sh`, 3);
  const { AutoTokenizer, env } = require(pkg);
  env.allowRemoteModels = false;  // never the hub
  env.allowLocalModels = true;
  // from_pretrained(id) reads localModelPath joined with id: the root, and
  // the directory's absolute path as the id.
  env.localModelPath = '/';
  const tok = await AutoTokenizer.from_pretrained(path.resolve(dir), { local_files_only: true });
  process.stdout.write(JSON.stringify({ class: tok.constructor.name, bos_token: tok.bos_token ?? null,
                                        eos_token: tok.eos_token ?? null }) + '\n');
  const rl = readline.createInterface({ input: process.stdin, crlfDelay: Infinity });
  const out = [];
  for await (const line of rl) {
    if (line === '') continue;
    const text = Buffer.from(line, 'base64').toString('utf8');
    out.push(JSON.stringify(Array.from(tok.encode(text))));
  }
  process.stdout.write(out.join('\n') + (out.length ? '\n' : ''));
}

main().catch((e) => die(String(e && e.stack || e), 1));
