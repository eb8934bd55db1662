# Sourced by gpu_env.sh: what the sweep scripts (gpu_sweep.sh, gpu_sasrec_sweep.sh) share.
# A SPEC is NAME or NAME:KEY=VALUE[,KEY=VALUE...]; each KEY=VALUE becomes a --set.
parse_spec() {  # parse_spec SPEC: sets spec_name and the array spec_sets (--set KEY=VALUE ...)
  local kv s
  spec_name=${1%%:*} spec_sets=()
  if [ "$spec_name" != "$1" ]; then
    IFS=, read -ra kv <<< "${1#*:}"
    for s in "${kv[@]}"; do spec_sets+=(--set "$s"); done
  fi
}
all_at_once() {  # all_at_once FUNC SPEC...: runs FUNC SPEC for every SPEC at once, then waits for them
  local pids=() spec
  export XLA_PYTHON_CLIENT_PREALLOCATE=false   # the processes share the GPU's memory
  for spec in "${@:2}"; do "$1" "$spec" & pids+=($!); done
  wait "${pids[@]}"   # not a bare wait: that would also wait for the log's tee
}
