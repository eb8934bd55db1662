#!/usr/bin/env bash
# Recall against training minutes for a `-long` preset: the first k retrievers (seeds 0..k-1) of a
# `-long` pipeline's work directory as one ensemble, k = 1..5 (k = 6 is the pipeline's own warm.json).
# Usage: docs/scripts/budget_evals.sh SRC_WORKDIR DST_DIR   (writes DST_DIR/k1.json ... k5.json;
# SRC_WORKDIR is left as it was). Then docs/scripts/plot_budget.py draws them.
set -euo pipefail
[ $# -eq 2 ] || { echo "usage: $0 SRC_WORKDIR DST_DIR" >&2; exit 2; }
src=$1; dst=$2
genret=${GENRET:-.venv/bin/genret}
for i in 1 2 3 4; do
  [ -d "$src/retriever_loo_seed$i" ] || { echo "$src: no retriever_loo_seed$i (a -long pipeline's work directory?)" >&2; exit 2; }
done
mkdir -p "$dst"
cp -r "$src/prepared" "$src/tokenizer" "$src/config.json" "$dst/"
if [ -d "$src/embeddings" ]; then cp -r "$src/embeddings" "$dst/"; fi
ln -sfn "$(realpath "$src/retriever_loo")" "$dst/retriever_loo"
for i in 1 2 3 4; do ln -sfn "$(realpath "$src/retriever_loo_seed$i")" "$dst/retriever_loo_seed$i"; done
for k in 1 2 3 4 5; do
  seeds=$(seq -s, 1 $((k - 1)))
  echo "== k=$k: seeds 0${seeds:+,$seeds}"
  "$genret" eval-warm --workdir "$dst" --set "eval.warm_ensemble_seeds=$seeds"
  cp "$dst/results/warm.json" "$dst/k$k.json"
done
