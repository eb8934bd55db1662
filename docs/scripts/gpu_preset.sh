#!/usr/bin/env bash
# One leave-one-out preset's whole ensemble trained on one GPU, every retriever at once (session
# 27, issue 17, deliverable 2): docs/scripts/gpu_presets.sh with one DATASET:PRESET, which says
# what runs and what comes back (under $OUT: log.txt, DATASET.tgz, evals.tgz).
#
#   bash docs/scripts/gpu_preset.sh DATASET PRESET LIMIT_S [KEY=VALUE ...]
#
# e.g. bash docs/scripts/gpu_preset.sh beauty beauty_item_cf 420 (EVAL_LIMIT_S, TEST and DRY_RUN as
# for gpu_presets.sh)
exec bash "$(dirname "$0")/gpu_presets.sh" "$3" "$1:$2" "${@:4}"
