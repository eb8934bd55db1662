#!/bin/bash
# How long `genret pipeline --jobs 2`, started as a background job of a script (SIGINT ignored, as
# such a job inherits it), takes to end once one of two stages running side by side dies: the
# pipeline asks the other to stop and waits for it (session 56; docs/BENCHMARKS.md, "Stopping").
#
# Usage: docs/scripts/stop_beside_failure.sh OUT [SOURCE]
#   OUT     an empty folder for the work directory and the log
#   SOURCE  the checkout whose code runs (default: this one; a `git worktree` of an older commit
#           gives the code before), with this checkout's .venv
# Prints the seconds from the SIGKILL of one stage to the pipeline's end, and its exit status.
set -euo pipefail
out=$(realpath -m "$1")
here=$(cd "$(dirname "$0")/../.." && pwd)
source_dir=$(realpath "${2:-$here}")
mkdir -p "$out"
[ -z "$(ls -A "$out")" ] || { echo "stop_beside_failure.sh: $out is not empty" >&2; exit 2; }
(
  trap "" INT  # what a background job of a non-interactive shell inherits
  cd "$source_dir"
  exec "$here/.venv/bin/python" -c \
    "import sys; sys.argv[0] = 'genret'; from experiments.cli import console; console()" \
    pipeline --dataset synthetic --config tiny --workdir "$out/w" --no-progress --set jobs=2 \
    --set seqmodel.num_epochs=2000 --set seqmodel.patience=100000 \
    --set eval.cold_start_fractions=0.02,0.05
) > "$out/log" 2>&1 &
pipeline=$!
workers=()
for _ in $(seq 600); do  # two retrievers side by side, a few seconds into training
  mapfile -t workers < <(pgrep -f "experiments.stage_worker $out/w retriever_cold" || true)
  [ "${#workers[@]}" -ge 2 ] && break
  sleep 0.5
done
[ "${#workers[@]}" -ge 2 ] || { echo "no two stages side by side; see $out/log" >&2; exit 1; }
sleep 5
start=$(date +%s.%N)
kill -KILL "${workers[0]}"
set +e
wait "$pipeline"
code=$?
set -e
end=$(date +%s.%N)
left=$(pgrep -f "experiments.stage_worker $out/w" || true)
echo "pipeline ended $(echo "$end - $start" | bc) s after one stage's SIGKILL, exit $code;" \
  "stage processes left: ${left:-none}"
tail -1 "$out/log"
