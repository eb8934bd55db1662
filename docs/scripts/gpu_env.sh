# Sourced by the device scripts (gpu_presets.sh, gpu_sweep.sh): logs
# to $OUT/log.txt, names the GPU, installs the carried wheels (.whl/) that the device image lacks
# and puts them and this checkout on PYTHONPATH (DRY_RUN=1 skips the install: a rehearsal on a
# machine where the project is installed).
# `versions` prints what will run; `use_pinned` switches flax/optax/orbax to .whl/pin/;
# `train_copy` trains one leave-one-out retriever in a fresh copy of gpu/DATASET; `all_at_once`
# runs one function per SPEC (NAME or NAME:KEY=VALUE[,KEY=VALUE...]), all at once on the GPU.
export PYTHONUNBUFFERED=1
exec > >(tee -a "$OUT/log.txt") 2>&1
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
nproc
if [ -z "${DRY_RUN:-}" ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl || exit 1
  export PYTHONPATH="/tmp/site:$PWD"
fi
versions() {
  python3 -c 'import jax, flax, optax, orbax.checkpoint as o, numpy
print("jax", jax.__version__, "flax", flax.__version__, "optax", optax.__version__,
      "orbax", o.__version__, "numpy", numpy.__version__, jax.devices())'
}
use_pinned() {
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/pin .whl/pin/*.whl
  export PYTHONPATH="/tmp/pin:$PYTHONPATH"
  versions
}
versions
train_copy() {  # train_copy DATASET PRESET LIMIT_S WORKDIR OUT_PREFIX [--set KEY=VALUE ...]
  # One retriever (eval.warm_ensemble_seeds emptied: one model, whatever the --set) in WORKDIR, a
  # fresh copy of gpu/DATASET, cut at LIMIT_S; its log, metrics.jsonl and train_summary.json go to
  # OUT_PREFIX{train.log,metrics.jsonl,train_summary.json}. Prints its rc and seconds.
  local dataset=$1 preset=$2 limit=$3 w=$4 o=$5 t0=$SECONDS rc label
  shift 5
  rm -rf "$w" && cp -r "gpu/$dataset" "$w"
  timeout -k 5 "$limit" python3 -m experiments.cli train-retriever --workdir "$w" --split loo \
    --config "$preset" --no-progress "$@" --set eval.warm_ensemble_seeds= > "${o}train.log" 2>&1
  rc=$? label=${o#"$OUT"/}
  echo "== ${label%[/_]}: train rc=$rc $((SECONDS - t0)) s"
  cp "$w/retriever_loo/metrics.jsonl" "${o}metrics.jsonl" 2>/dev/null
  cp "$w/retriever_loo/train_summary.json" "${o}train_summary.json" 2>/dev/null
  return $rc
}
all_at_once() {  # all_at_once FUNC SPEC...: FUNC NAME [--set KEY=VALUE ...] for every SPEC at once; waits
  local pids=() spec kv s sets
  export XLA_PYTHON_CLIENT_PREALLOCATE=false   # the processes share the GPU's memory
  for spec in "${@:2}"; do
    sets=()
    if [ "${spec%%:*}" != "$spec" ]; then
      IFS=, read -ra kv <<< "${spec#*:}"
      for s in "${kv[@]}"; do sets+=(--set "$s"); done
    fi
    "$1" "${spec%%:*}" "${sets[@]}" & pids+=($!)
  done
  wait "${pids[@]}"   # not a bare wait: that would also wait for the log's tee
}
