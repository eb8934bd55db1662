# Sourced by the device scripts (gpu_run.sh, gpu_sweep.sh): logs to $OUT/log.txt, names the GPU,
# installs the carried wheels (.whl/) that the device image lacks and puts them and this checkout on
# PYTHONPATH (DRY_RUN=1 skips the install: a rehearsal on a machine where the project is installed).
# `versions` prints what will run; `use_pinned` switches flax/optax/orbax to .whl/pin/.
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
