#!/usr/bin/env bash
# Leave-one-out presets' whole ensembles trained on one GPU, every retriever of every preset at once
# (docs/guide/gpu.md): each seed of a
# preset (seqmodel.seed and eval.warm_ensemble_seeds) trains in its own fresh copy of gpu/DATASET
# (prepared data and tokenizer, docs/scripts/gpu_prepare.sh) as its own process; then each preset's
# retrievers are put in one work directory under the names the pipeline gives them (retriever_loo,
# retriever_loo_seedN) and ranked as one ensemble with `genret eval-warm --validation`, as
# `genret pipeline` would rank them (the presets' rankings at once, each cut at EVAL_LIMIT_S).
#
#   bash docs/scripts/gpu_presets.sh LIMIT_S DATASET:PRESET [DATASET:PRESET ...] [KEY=VALUE ...]
#
# e.g. bash docs/scripts/gpu_presets.sh 540 beauty:beauty_item_cf sports:sports_item_cf
# Each training gets LIMIT_S seconds, each evaluation EVAL_LIMIT_S seconds (default 240; 0: no
# evaluation); each KEY=VALUE is a --set for every training and evaluation (a rehearsal on a CPU:
# DRY_RUN=1 OUT=/tmp/o bash ... 600 beauty:beauty_item_cf seqmodel.max_steps=20).
# What comes back, under $OUT: log.txt, per DATASET DATASET.tgz, holding
# DATASET_seedN_{train.log,metrics.jsonl,train_summary.json}, and evals.tgz, holding every
# DATASET_eval_SPLIT.log and DATASET_validation_warm.json. No test number is computed unless TEST=1
# (then DATASET_warm.json too, ranked before the validation split).
set -u
limit=$1
shift
pairs=() overrides=()
for a in "$@"; do
  case $a in
    *=*) overrides+=(--set "$a") ;;
    *:*) pairs+=("$a") ;;
    *) echo "gpu_presets.sh: '$a' is neither DATASET:PRESET nor KEY=VALUE"; exit 2 ;;
  esac
done
[ ${#pairs[@]} -gt 0 ] || { echo "gpu_presets.sh: no DATASET:PRESET given"; exit 2; }
source docs/scripts/gpu_env.sh

seeds_of() {  # seeds_of PRESET: its main seed, then its ensemble seeds, space-separated
  python3 - "$1" "${overrides[@]}" <<'PY'
import sys
from experiments.config import apply_overrides, load_preset
cfg = apply_overrides(load_preset(sys.argv[1]), sys.argv[3::2])
print(cfg.seqmodel.seed, *cfg.eval.warm_ensemble_seeds)
PY
}

members=()
declare -A preset_of seeds
for pair in "${pairs[@]}"; do
  d=${pair%%:*} p=${pair#*:}
  preset_of[$d]=$p
  seeds[$d]=$(seeds_of "$p") || exit 1
  echo "== $d ($p): seeds ${seeds[$d]}"
  for s in ${seeds[$d]}; do members+=("$d/$p/$s"); done
done

# (not named `sets`: all_at_once's local of that name would hide it from member, as bash shows a
# function's locals to the functions it calls, and the KEY=VALUEs would never reach the trainings)
member() {  # member DATASET/PRESET/SEED: one retriever in /tmp/preset_DATASET_SEED
  local d p s
  IFS=/ read -r d p s <<< "$1"
  train_copy "$d" "$p" "$limit" "/tmp/preset_${d}_$s" "$OUT/${d}_seed${s}_" "${overrides[@]}" \
    --set "seqmodel.seed=$s"
}

t0=$SECONDS
all_at_once member "${members[@]}"   # no ':' in a member: member NAME, no --set
echo "== all trainings: $((SECONDS - t0)) s"
# one archive per dataset before the rankings, so a call cut short still returns every training's
# files (the device tool returns at most 8 files)
for d in "${!preset_of[@]}"; do
  (cd "$OUT" && tar -czf "$d.tgz" "${d}"_seed* && rm -f "${d}"_seed*)
done

rank() {  # rank DATASET SPLIT [--validation]: the ensemble on one split, cut at EVAL_LIMIT_S
  local t0=$SECONDS e=/tmp/preset_$1_ensemble
  timeout -k 5 "${EVAL_LIMIT_S:-240}" python3 -m experiments.cli eval-warm --workdir "$e" "${@:3}" \
    --batch-size 256 --no-progress --config "${preset_of[$1]}" "${overrides[@]}" \
    > "$OUT/$1_eval_$2.log" 2>&1
  echo "== $1 eval $2 rc=$? $((SECONDS - t0)) s"
  tail -3 "$OUT/$1_eval_$2.log"
}
ensemble() {  # ensemble DATASET: its retrievers in one work directory, ranked
  local d=$1 e=/tmp/preset_$1_ensemble main s
  rm -rf "$e" && cp -r "gpu/$d" "$e"
  read -r main others <<< "${seeds[$d]}"
  mv "/tmp/preset_${d}_$main/retriever_loo" "$e/retriever_loo"
  for s in $others; do mv "/tmp/preset_${d}_$s/retriever_loo" "$e/retriever_loo_seed$s"; done
  [ "${EVAL_LIMIT_S:-240}" = 0 ] && return
  # TEST=1 ranks the test split first (a rerun of a preset's record, reported as it comes)
  if [ -n "${TEST:-}" ]; then rank "$d" test && cp "$e/results/warm.json" "$OUT/${d}_warm.json"; fi
  rank "$d" validation --validation &&
    cp "$e/results/validation_warm.json" "$OUT/${d}_validation_warm.json"
}
pids=()
for d in "${!preset_of[@]}"; do ensemble "$d" & pids+=($!); done
wait "${pids[@]}"
# (a ranking cut short wrote no warm.json: its log then comes back as a file of its own)
(cd "$OUT" && tar -czf evals.tgz ./*_eval_*.log ./*warm.json 2>/dev/null &&
  rm -f ./*_eval_*.log ./*warm.json)
echo "== total $SECONDS s"
