#!/usr/bin/env bash
# Here, before the device calls of docs/scripts/gpu_run.sh (session 24): what they carry.
#   gpu/D/{prepared,tokenizer}  from the work directory of a `-long` pipeline, runs/D_long
#                               (D_item_cf_long shares its tokenizer with D_item_cf); no retriever
#   .whl/*.whl, .whl/pin/*.whl  wheels for the device's Python 3.12 of what its image lacks
# Both folders are ignored (.git/info/exclude). Then, with the device tool:
#   run  command "bash docs/scripts/gpu_run.sh"              carry gpu/beauty .whl
#   run  command "bash docs/scripts/gpu_run.sh toys-sports"  carry gpu/toys gpu/sports .whl
set -euo pipefail
cd "$(dirname "$0")/../.."
pip=".venv/bin/python -m pip"
grep -qx '/gpu/' .git/info/exclude || printf '/gpu/\n/.whl/\n' >> .git/info/exclude

for d in beauty toys sports; do
  [ -d "runs/${d}_long/tokenizer" ] || { echo "runs/${d}_long/tokenizer: missing (run its pipeline)"; exit 1; }
  rm -rf "gpu/$d" && mkdir -p "gpu/$d"
  cp -r "runs/${d}_long/prepared" "runs/${d}_long/tokenizer" "gpu/$d/"
  rm -rf "gpu/$d/tokenizer/checkpoints"   # the SIDs are what training reads
done

target=(--only-binary=:all: --python-version 3.12 --implementation cp --platform manylinux_2_28_x86_64
        --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64)
mkdir -p .whl/pin
for p in tensorflow-datasets==4.9.10 array_record==0.8.6 grain==0.2.18 dm-tree==0.1.10 \
         immutabledict==4.3.1 simple-parsing==0.1.9 docstring-parser==0.18.0 tensorflow-metadata==1.21.0 \
         googleapis-common-protos==1.76.0 termcolor==3.3.0 toml==0.10.2 portpicker==1.6.0 \
         importlib_resources==7.1.0; do
  $pip download -q --no-deps "${target[@]}" -d .whl "$p"
done
$pip wheel -q --no-deps -w .whl promise==2.3   # published as a source archive only
for p in flax==0.12.8 optax==0.2.8 orbax-checkpoint==0.12.8; do
  $pip download -q --no-deps "${target[@]}" -d .whl/pin "$p"
done
du -sh gpu .whl
