#!/usr/bin/env bash
# The regression gate job of .github/workflows/gpu.yml (`qualify gate`), as a script so it runs the
# same on a runner and by hand.
#
# Environment (all optional):
#   QUALIFY_GATE_MODE  change (default): every protocol the change touches, each arm at QUALIFY_BASE
#                      against the working tree; nightly: every protocol, the default branch against
#                      itself, timed although the code is identical (the gate's false-positive rate)
#   QUALIFY_BASE       git revision a pull request is gated against (default: the merge base with main)
#   QUALIFY_OUT        a fresh folder for gate.json, GATE.md and the records (default gate-out)
#   QUALIFY_PYTHON     a Python with qualify installed; default: a fresh .venv with pip install -e ".[cu13,test]"
#   QUALIFY_EXTRA      the install extra of that fresh .venv: cu13 (default) or cu12
#   GITHUB_STEP_SUMMARY  qualify gate appends its Markdown table here
#
# Exit code: qualify gate's (README, "The regression gate"): 0 passed, 1 slower or outputs beyond
# their bound, 7 can't tell, 2-6 as elsewhere, 130 interrupted.
set -uo pipefail
cd "$(dirname "$0")/../.."

OUT=${QUALIFY_OUT:-gate-out}
MODE=${QUALIFY_GATE_MODE:-change}
. .github/scripts/job-setup.sh
set_up_python

args=(gate --out "$OUT")
case "$MODE" in
  change)
    [ -n "${QUALIFY_BASE:-}" ] && args+=(--base "$QUALIFY_BASE")
    ;;
  nightly)
    args+=(--base HEAD --time-identical)
    for plan in protocols/*/plan.json; do
      args+=(--protocol "$(basename "$(dirname "$plan")")")
    done
    ;;
  *) annotate error "gate" "QUALIFY_GATE_MODE must be change or nightly"; record_code 2; finish ;;
esac

echo "+ qualify ${args[*]}"
interruptible "$PY" -m qualify "${args[@]}"
code=$?
record_code "$code"
if [ "$code" -ne 0 ]; then
  annotate error "qualify gate" "exit ${code}: $(meaning "$code")"
fi
finish
