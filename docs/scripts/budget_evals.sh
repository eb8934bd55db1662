#!/usr/bin/env bash
# Recall against training minutes for a leave-one-out preset: the first k retrievers of a
# pipeline's work directory as one ensemble (retriever_loo and the k-1 lowest retriever_loo_seedS),
# k = 1..n-1 for its n retrievers (k = n is the pipeline's own warm.json; a `-long` pipeline has
# six, an in-budget one four). Any pipeline seed: seed N's retrievers are seeds 4N..4N+3.
# Usage: docs/scripts/budget_evals.sh SRC_WORKDIR DST_DIR   (writes DST_DIR/k1.json ...;
# SRC_WORKDIR is left as it was; KS="3 4" evaluates only those k). Then docs/scripts/plot_budget.py
# draws them.
set -euo pipefail
[ $# -eq 2 ] || { echo "usage: $0 SRC_WORKDIR DST_DIR" >&2; exit 2; }
src=$1; dst=$2
genret=${GENRET:-.venv/bin/genret}
# The retrievers beyond the first, in seed order: retriever_loo_seedS for the pipeline's
# eval.warm_ensemble_seeds (1, 2, 3 for pipeline seed 0; 4N+1.. for pipeline seed N).
mapfile -t extra_seeds < <(find "$src" -maxdepth 1 -name 'retriever_loo_seed*' -printf '%f\n' \
  | sed 's/^retriever_loo_seed//' | grep -E '^[0-9]+$' | sort -n)
extra=${#extra_seeds[@]}
[ -d "$src/retriever_loo" ] && [ "$extra" -ge 1 ] || {
  echo "$src: no retriever_loo and retriever_loo_seedS (a leave-one-out pipeline's work directory?)" >&2; exit 2; }
for k in ${KS:-}; do
  [ "$k" -ge 1 ] 2>/dev/null && [ "$k" -le "$extra" ] || { echo "KS: k=$k is not in 1..$extra" >&2; exit 2; }
done
mkdir -p "$dst"
cp -r "$src/prepared" "$src/tokenizer" "$src/config.json" "$dst/"
if [ -d "$src/embeddings" ]; then cp -r "$src/embeddings" "$dst/"; fi
ln -sfn "$(realpath "$src/retriever_loo")" "$dst/retriever_loo"
for i in "${extra_seeds[@]}"; do ln -sfn "$(realpath "$src/retriever_loo_seed$i")" "$dst/retriever_loo_seed$i"; done
for k in ${KS:-$(seq 1 "$extra")}; do
  seeds=$(IFS=,; echo "${extra_seeds[*]:0:k-1}")
  echo "== k=$k: the first retriever${seeds:+ and seeds $seeds}"
  "$genret" eval-warm --workdir "$dst" --set "eval.warm_ensemble_seeds=$seeds"
  cp "$dst/results/warm.json" "$dst/k$k.json"
done
