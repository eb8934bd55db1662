#!/usr/bin/env bash
# Here, before the device calls of docs/scripts/gpu_presets.sh and gpu_sweep.sh: what they carry.
#   gpu/D/{prepared,tokenizer}  `genret prepare` and `genret train-tokenizer --config D_item_cf`
#                               (seed 0; D_item_cf_long shares the tokenizer), made in
#                               runs/gpu_prep/D; the tokenizer without its checkpoints
#   .whl/*.whl, .whl/pin/*.whl  wheels for the device's Python 3.12 of what its image lacks
# Both folders are ignored (.git/info/exclude). Then, with the device tool, e.g.:
#   run  command "EVAL_LIMIT_S=100 bash docs/scripts/gpu_presets.sh 460 beauty:beauty_item_cf
#                 sports:sports_item_cf"  carry gpu .whl
#
#   bash docs/scripts/gpu_prepare.sh [DATASET ...]    (default: beauty toys sports; about 90 s each)
set -euo pipefail
cd "$(dirname "$0")/../.."
genret=.venv/bin/genret pip=".venv/bin/python -m pip"
exclude=$(git rev-parse --git-path info/exclude)   # also in a worktree, where .git is a file
mkdir -p "$(dirname "$exclude")"
grep -qx '/gpu/' "$exclude" 2>/dev/null || printf '/gpu/\n/.whl/\n' >> "$exclude"

datasets=("$@")
[ ${#datasets[@]} -gt 0 ] || datasets=(beauty toys sports)
for d in "${datasets[@]}"; do
  w=runs/gpu_prep/$d
  $genret prepare --dataset "$d" --workdir "$w" --config "${d}_item_cf" --no-progress
  $genret train-tokenizer --workdir "$w" --config "${d}_item_cf" --no-progress
  rm -rf "gpu/$d" && mkdir -p "gpu/$d"
  cp -r "$w/prepared" "$w/tokenizer" "gpu/$d/"
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
