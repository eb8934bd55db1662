#!/usr/bin/env bash
# A sweep of leave-one-out retrievers on one GPU, all at once (docs/guide/gpu.md): each variant
# trains one retriever from a fresh copy of gpu/DATASET (prepared data and tokenizer,
# docs/scripts/gpu_prepare.sh) and is then scored on the full validation split
# (`genret eval-warm --validation`).
#
#   bash docs/scripts/gpu_sweep.sh DATASET PRESET LIMIT_S SPEC [SPEC ...]
#   SPEC: NAME or NAME:KEY=VALUE[,KEY=VALUE...]   (each KEY=VALUE becomes a --set)
#
# e.g. bash docs/scripts/gpu_sweep.sh beauty beauty_item_cf_long 420 base do4:seqmodel.dropout=0.4
# Every variant's training gets LIMIT_S seconds (a variant cut off has no score), its evaluation
# 150 s. What comes back, under $OUT: log.txt, sweep.json (the validation table of every variant) and
# variants.tar.gz, holding NAME/{train.log,eval.log,metrics.jsonl,train_summary.json,
# validation_warm.json} (one archive: the device tool returns only a few files per call).
set -u
source docs/scripts/gpu_env.sh
dataset=$1 preset=$2 limit=$3
shift 3

variant() {  # variant NAME [--set KEY=VALUE ...]
  local name=$1 w="/tmp/sweep_$1" o="$OUT/$1"
  shift   # "$@": the --set flags
  mkdir -p "$o"
  train_copy "$dataset" "$preset" "$limit" "$w" "$o/" "$@"
  local t0=$SECONDS
  timeout -k 5 150 python3 -m experiments.cli eval-warm --workdir "$w" --validation --batch-size 256 \
    --config "$preset" --set eval.warm_ensemble_seeds= "$@" > "$o/eval.log" 2>&1
  echo "== $name: eval rc=$? $((SECONDS - t0)) s"
  cp "$w/results/validation_warm.json" "$o/" 2>/dev/null
}

all_at_once variant "$@"
python3 - "$OUT" <<'PY'
import json, pathlib, sys
out = pathlib.Path(sys.argv[1]); rows = {}
for f in sorted(out.glob("*/validation_warm.json")):
    m = json.loads(f.read_text())["methods"]["static_all_items"]
    s = json.loads((f.parent / "train_summary.json").read_text())
    rows[f.parent.name] = {k: m[k] for k in ("recall@5", "ndcg@5", "recall@10", "ndcg@10")} | {
        "best_step": s["best_step"], "steps": s["steps"], "train_s": s["train_seconds"]}
    print(f.parent.name, " ".join(f"{100 * v:.2f}" for v in list(rows[f.parent.name].values())[:4]),
          s["best_step"], s["steps"], round(s["train_seconds"]))
(out / "sweep.json").write_text(json.dumps(rows, indent=1))
PY
tar -czf "$OUT/variants.tar.gz" -C "$OUT" "${@%%:*}" && (cd "$OUT" && rm -rf "${@%%:*}")
echo "== total $SECONDS s"
