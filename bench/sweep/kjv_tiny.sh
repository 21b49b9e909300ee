# Sourced by the sweep and segment benchmarks: KJV byte shards in WORK/data
# (made once) and WORK/base.ini, the tiny model both time (d4's depth, 4
# layers and 4 heads, at 64 channels; B=8, T=64, 8 validation batches).
#   kjv_tiny_setup WORK RATCHET
kjv_tiny_setup() {
  local work=$1 ratchet=$2
  if [ ! -f "$work/data/val_000000.h5" ]; then
    bible -f "Gen1:1-Rev22:21" >"$work/kjv.txt"
    "$ratchet" shard --tokenizer byte --input "$work/kjv.txt" --output-dir "$work/data" \
      --val-fraction 0.02 --no-progress >/dev/null
  fi
  cat >"$work/base.ini" <<INI
# d4's depth (4 layers, 4 heads) at 64 channels and a short context
model = custom
layers = 4
heads = 4
channels = 64
max-seq-len = 64
seq-len = 64
batch-size = 8
eval-batches = 8
price-per-device-hour = 1
train-data = $work/data/train_*.h5
val-data = $work/data/val_*.h5
INI
}
