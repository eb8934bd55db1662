#!/usr/bin/env bash
# Recall against training minutes for a leave-one-out preset: the first k retrievers (seeds 0..k-1)
# of a pipeline's work directory as one ensemble, k = 1..n-1 for its n retrievers (k = n is the
# pipeline's own warm.json; a `-long` pipeline has six, an in-budget one four).
# Usage: docs/scripts/budget_evals.sh SRC_WORKDIR DST_DIR   (writes DST_DIR/k1.json ...;
# SRC_WORKDIR is left as it was; KS="3 4" evaluates only those k). Then docs/scripts/plot_budget.py
# draws them.
set -euo pipefail
[ $# -eq 2 ] || { echo "usage: $0 SRC_WORKDIR DST_DIR" >&2; exit 2; }
src=$1; dst=$2
genret=${GENRET:-.venv/bin/genret}
extra=0  # retrievers beyond the first (retriever_loo_seed1..extra)
while [ -d "$src/retriever_loo_seed$((extra + 1))" ]; do extra=$((extra + 1)); done
[ -d "$src/retriever_loo" ] && [ $extra -ge 1 ] || {
  echo "$src: no retriever_loo and retriever_loo_seed1 (a leave-one-out pipeline's work directory?)" >&2; exit 2; }
for k in ${KS:-}; do
  [ "$k" -ge 1 ] 2>/dev/null && [ "$k" -le $extra ] || { echo "KS: k=$k is not in 1..$extra" >&2; exit 2; }
done
mkdir -p "$dst"
cp -r "$src/prepared" "$src/tokenizer" "$src/config.json" "$dst/"
if [ -d "$src/embeddings" ]; then cp -r "$src/embeddings" "$dst/"; fi
ln -sfn "$(realpath "$src/retriever_loo")" "$dst/retriever_loo"
for i in $(seq 1 $extra); do ln -sfn "$(realpath "$src/retriever_loo_seed$i")" "$dst/retriever_loo_seed$i"; done
for k in ${KS:-$(seq 1 $extra)}; do
  seeds=$(seq -s, 1 $((k - 1)))
  echo "== k=$k: seeds 0${seeds:+,$seeds}"
  "$genret" eval-warm --workdir "$dst" --set "eval.warm_ensemble_seeds=$seeds"
  cp "$dst/results/warm.json" "$dst/k$k.json"
done
