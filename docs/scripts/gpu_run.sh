#!/usr/bin/env bash
# The device calls of session 24 (issue 17, deliverable 2): the leave-one-out retrievers' training on
# a GPU, the same command as on the CPU, plus STATIC's constrained-search latency there.
#
# Run from the repository root on the device machine, with
#   gpu/beauty/{prepared,tokenizer}  a Beauty work directory after `genret prepare` and
#                                    `genret train-tokenizer --config beauty_item_cf` (no retriever)
#   .whl/*.whl                       wheels of the packages the device image lacks (tfds, grain,
#                                    array_record and their needs); .whl/pin/ flax, optax and orbax
#                                    at this project's versions, used only if the image's fail
# and $OUT the folder whose files come back. `gpu_run.sh toys-sports` trains the Toys and Sports
# presets' seed 0 instead, from gpu/toys and gpu/sports. Every step has its own time limit, so the whole
# script ends within about 9 minutes.
set -u
source docs/scripts/gpu_env.sh

train() {  # train NAME CONFIG LIMIT_S [SOURCE]: a fresh copy of gpu/SOURCE (beauty), one retriever
  local name=$1 config=$2 limit=$3 w="/tmp/w_$1"
  rm -rf "$w" && cp -r "gpu/${4:-beauty}" "$w"
  local t0=$SECONDS
  timeout -k 5 "$limit" python3 -m experiments.cli train-retriever --workdir "$w" --split loo \
    --config "$config" --no-progress
  local rc=$?
  echo "== $name: rc=$rc wall=$((SECONDS - t0)) s"
  cp "$w/retriever_loo/train_summary.json" "$OUT/${name}_summary.json" 2>/dev/null
  cp "$w/retriever_loo/metrics.jsonl" "$OUT/${name}_metrics.jsonl" 2>/dev/null
  return $rc
}

if [ "${1:-beauty}" = toys-sports ]; then  # the second call: the Toys and Sports presets' seed 0
  train toys toys_item_cf 150 toys
  train sports sports_item_cf 170 sports
  echo "== total $SECONDS s"
  exit 0
fi

train cf beauty_item_cf 240
rc=$?
# Failed (not timed out) before its first validation: the image's flax, optax or orbax may not fit
# this code, so try once more with the project's versions of them.
if [ $rc -ne 0 ] && [ $rc -ne 124 ] && [ $rc -ne 137 ] && [ ! -s "$OUT/cf_metrics.jsonl" ]; then
  echo "== retrying with flax/optax/orbax at the project's versions"
  use_pinned
  train cf beauty_item_cf 200
fi

for n in 1000000 10000000; do
  timeout -k 5 60 python3 -m experiments.cli bench-constraints --num-items $n --reps 10 \
    --methods static,ppv_exact,ppv_approx,hash_bitmap --out "$OUT/constraints_$n.json" | tail -20
done

left=$((530 - SECONDS))
[ $left -gt 30 ] && train long beauty_item_cf_long $left
echo "== total $SECONDS s"
