# Sourced by gpu-job.sh and gate-job.sh (from the repository root): what both jobs need before
# their first qualify command, kept in one place so the two cannot drift apart.
#   - the CUDA toolkit on PATH, qualify's exit-code table (exit-codes.sh);
#   - signal forwarding: a cancelled job signals the script, not its children, and a background
#     child of a non-interactive shell ignores SIGINT; so each long command runs in the background
#     (`interruptible`) and is sent SIGTERM, which qualify handles as Ctrl-C: the trial is kept,
#     marked interrupted, exit 130;
#   - `set_up_python`: the Python that runs qualify, in PY.
# shellcheck shell=bash

for dir in /usr/local/cuda/bin ${CUDA_HOME:+$CUDA_HOME/bin}; do
  [ -d "$dir" ] && PATH="$PATH:$dir"
done
export PATH

. .github/scripts/exit-codes.sh

child=0
interrupted=0
on_signal() {
  interrupted=1
  [ "$child" -ne 0 ] && kill -TERM "$child" 2>/dev/null
}
trap on_signal INT TERM

interruptible() {  # run a command so that a signal to this script reaches it; returns its code
  "$@" &
  child=$!
  local code
  while :; do
    wait "$child"
    code=$?
    kill -0 "$child" 2>/dev/null || break  # wait returned early for a trap: the child still runs
  done
  child=0
  [ "$interrupted" -eq 1 ] && record_code 130
  return "$code"
}

stop_if_interrupted() {
  [ "$interrupted" -eq 1 ] && finish
  return 0
}

# PY: QUALIFY_PYTHON, or a fresh .venv with `pip install -e ".[QUALIFY_EXTRA,test]"` (cu13 default,
# or cu12); a set-up that fails ends the job with exit 5 (device or environment).
set_up_python() {
  if [ -n "${QUALIFY_PYTHON:-}" ]; then
    PY=$QUALIFY_PYTHON
    return 0
  fi
  local extra=${QUALIFY_EXTRA:-cu13}
  case "$extra" in cu13|cu12) ;; *) annotate error "set-up" "QUALIFY_EXTRA must be cu13 or cu12"; record_code 5; finish ;; esac
  python3 -m venv .venv && .venv/bin/python -m pip install -q -e ".[${extra},test]" || {
    annotate error "set-up" "pip install -e .[${extra},test] failed"
    record_code 5
    finish
  }
  PY=.venv/bin/python
}
