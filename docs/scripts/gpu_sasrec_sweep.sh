#!/usr/bin/env bash
# A sweep of SASRec baselines on one GPU, all at once (session 34, issue 17, deliverable 3): each
# variant trains one `genret sasrec` in a fresh copy of gpu/DATASET (its prepared data; no tokenizer
# needed) and ranks the full validation split (--validation: the test targets are not read).
#
#   bash docs/scripts/gpu_sasrec_sweep.sh DATASET PRESET LIMIT_S SPEC [SPEC ...]
#   SPEC: NAME or NAME:KEY=VALUE[,KEY=VALUE...]   (each KEY=VALUE becomes a --set)
#
# e.g. bash docs/scripts/gpu_sasrec_sweep.sh beauty beauty 400 base d128:sasrec.d_model=128,sasrec.mlp_dim=512
# Each variant gets LIMIT_S seconds for training and ranking together (one cut off has no score,
# only its holdout curve). On an H200 with six variants at once (session 34), the one that finished
# spent about 200 s of its 359 s outside the training loop (loading, compiling, ranking), and the
# base recipe needed more than 380 s in all. What comes back, under $OUT: log.txt, sweep.json
# (every variant's validation numbers) and variants.tar.gz, holding
# NAME/{sasrec.log,metrics.jsonl,validation_sasrec.json}.
set -u
source docs/scripts/gpu_env.sh
dataset=$1 preset=$2 limit=$3
shift 3

variant() {  # variant NAME [--set KEY=VALUE ...]
  local name=$1 w="/tmp/sas_$1" o="$OUT/$1" t0=$SECONDS
  shift   # "$@": the --set flags
  rm -rf "$w" && mkdir -p "$w" "$o" && cp -r "gpu/$dataset/prepared" "$w/"
  timeout -k 5 "$limit" python3 -m experiments.cli sasrec --workdir "$w" --config "$preset" \
    --validation --no-progress "$@" > "$o/sasrec.log" 2>&1
  echo "== $name: rc=$? $((SECONDS - t0)) s"
  cp "$w/results/validation_sasrec.json" "$o/" 2>/dev/null
  cp "$w/sasrec_loo/metrics.jsonl" "$o/" 2>/dev/null   # the holdout curve, kept for a run cut off
}

all_at_once variant "$@"
python3 - "$OUT" <<'PY'
import json, pathlib, sys
out = pathlib.Path(sys.argv[1]); rows = {}
for f in sorted(out.glob("*/validation_sasrec.json")):
    r = json.loads(f.read_text())
    m, t = r["methods"]["sasrec"], r["train"]
    rows[f.parent.name] = {k: m[k] for k in ("recall@5", "ndcg@5", "recall@10", "ndcg@10")} | {
        "excluded": r["history_excluded"]["sasrec"], "train": t}
    print(f.parent.name, " ".join(f"{100 * m[k]:.2f}" for k in ("recall@5", "ndcg@5", "recall@10", "ndcg@10")),
          {k: t.get(k) for k in ("steps", "best_step", "train_seconds_this_run")})
(out / "sweep.json").write_text(json.dumps(rows, indent=1))
PY
tar -czf "$OUT/variants.tar.gz" -C "$OUT" "${@%%:*}" && (cd "$OUT" && rm -rf "${@%%:*}")
echo "== total $SECONDS s"
