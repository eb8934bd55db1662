#!/usr/bin/env bash
# A leave-one-out preset's whole ensemble trained on one GPU, every retriever at once (session 27,
# issue 17, deliverable 2): each seed of the preset (seqmodel.seed and eval.warm_ensemble_seeds)
# trains in its own fresh copy of gpu/DATASET (prepared data and tokenizer, docs/scripts/gpu_prepare.sh)
# as its own process; then the retrievers are put in one work directory under the names the pipeline
# gives them (retriever_loo, retriever_loo_seedN) and ranked as one ensemble with
# `genret eval-warm --validation`, as `genret pipeline` would rank them.
#
#   bash docs/scripts/gpu_preset.sh DATASET PRESET LIMIT_S [KEY=VALUE ...]
#
# e.g. bash docs/scripts/gpu_preset.sh beauty beauty_item_cf 420
# Each training gets LIMIT_S seconds, the evaluation EVAL_LIMIT_S seconds (default 240); each
# KEY=VALUE is a --set for both (a rehearsal on a CPU: DRY_RUN=1 OUT=/tmp/o bash ... beauty
# beauty_item_cf 600 seqmodel.max_steps=20).
# What comes back, under $OUT: log.txt, validation_warm.json and preset.tgz, holding
# seedN_{train.log,metrics.jsonl,train_summary.json} and eval_SPLIT.log. No test number is computed
# unless TEST=1 (then warm.json too, ranked before the validation split).
set -u
source docs/scripts/gpu_env.sh
dataset=$1 preset=$2 limit=$3
shift 3
sets=()
for kv in "$@"; do sets+=(--set "$kv"); done

read -r main others < <(python3 - "$preset" "${sets[@]}" <<'PY'
import sys
from experiments.config import apply_overrides, load_preset
cfg = apply_overrides(load_preset(sys.argv[1]), sys.argv[3::2])
print(cfg.seqmodel.seed, ",".join(map(str, cfg.eval.warm_ensemble_seeds)))
PY
)
echo "== main seed $main, ensemble seeds ${others:-none}"

member() {  # member SEED: one retriever in /tmp/preset_SEED
  train_copy "$dataset" "$preset" "$limit" "/tmp/preset_$1" "$OUT/seed${1}_" "${sets[@]}" \
    --set "seqmodel.seed=$1"
}

t0=$SECONDS
all_at_once member "$main" ${others//,/ }   # no ':' in a seed: member SEED, no --set
echo "== all trainings: $((SECONDS - t0)) s"

e=/tmp/preset_ensemble
rm -rf "$e" && cp -r "gpu/$dataset" "$e"
mv "/tmp/preset_$main/retriever_loo" "$e/retriever_loo"
for s in ${others//,/ }; do mv "/tmp/preset_$s/retriever_loo" "$e/retriever_loo_seed$s"; done
rank() {  # rank SPLIT [--validation]: the ensemble on one split, cut at EVAL_LIMIT_S
  local t0=$SECONDS
  timeout -k 5 "${EVAL_LIMIT_S:-240}" python3 -m experiments.cli eval-warm --workdir "$e" "${@:2}" \
    --batch-size 256 --config "$preset" "${sets[@]}" > "$OUT/eval_$1.log" 2>&1
  echo "== eval $1 rc=$? $((SECONDS - t0)) s"
  tail -3 "$OUT/eval_$1.log"
}
# TEST=1 ranks the test split first (a rerun of a preset's record, reported as it comes)
if [ -n "${TEST:-}" ]; then rank test && cp "$e/results/warm.json" "$OUT/"; fi
rank validation --validation && cp "$e/results/validation_warm.json" "$OUT/"
# one archive: the device tool returns only a few files per call
(cd "$OUT" && tar -czf preset.tgz seed* eval_*.log ./*warm.json 2>/dev/null; rm -f seed* eval_*.log)
echo "== total $SECONDS s"
