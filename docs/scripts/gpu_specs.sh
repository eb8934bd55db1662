# Sourced by gpu_env.sh: what the sweep scripts (gpu_sweep.sh, gpu_sasrec_sweep.sh) share.
# A SPEC is NAME or NAME:KEY=VALUE[,KEY=VALUE...]; each KEY=VALUE becomes a --set.
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
