#!/usr/bin/env bash
# The GPU job of .github/workflows/gpu.yml, as a script so it runs the same on a runner and by hand:
#   qualify doctor --role ci → QUALIFY_REQUIRE_GPU=1 pytest -m gpu → run/compare each protocol → summary.
#
# Environment (all optional):
#   QUALIFY_PROTOCOL   a protocol under protocols/ to qualify (workflow_dispatch); else the ones
#                      `qualify changed` finds between QUALIFY_BASE and HEAD
#   QUALIFY_BASE       git revision a pull request is measured from (origin/main)
#   QUALIFY_OUT        folder for the records, one per protocol (default ci-records); must not hold them yet
#   QUALIFY_LABEL      the runner's GPU label, for the summary's heading (default: the host name)
#   QUALIFY_PYTHON     a Python with qualify installed; default: a fresh .venv with pip install -e ".[cu13,test]"
#   QUALIFY_EXTRA      the install extra of the runner's driver for that fresh .venv: cu13 (default) or cu12
#   QUALIFY_GPU_TESTS  0 skips pytest -m gpu (for a quick manual run; CI always runs them)
#   GITHUB_STEP_SUMMARY  where the Markdown summary is appended (default: $QUALIFY_OUT/summary.md)
#
# Shared-library protocols (`qualify compare`) are built with the commands in .github/qualify-ci.json,
# whose `sources` also tell `qualify changed` which files those libraries come from.
#
# Exit code: qualify's table (README). Over several protocols the most severe wins:
#   130 interrupted > 70 bug > 5 device > 6 tool > 4 build > 3 frozen > 2 bad input > 7 incomplete
#   > 1 not qualified > 0 qualified. 1 and 7 fail the check: the reason is in the summary.
set -uo pipefail
cd "$(dirname "$0")/../.."

OUT=${QUALIFY_OUT:-ci-records}
LABEL=${QUALIFY_LABEL:-$(hostname)}
CONFIG=.github/qualify-ci.json
mkdir -p "$OUT"
SUMMARY=${GITHUB_STEP_SUMMARY:-$OUT/summary.md}
. .github/scripts/job-setup.sh

{
  echo "## qualify on ${LABEL}"
  echo
} >>"$SUMMARY"

# -- the environment ---------------------------------------------------------------------------
set_up_python
qualify() { interruptible "$PY" -m qualify "$@"; }

echo "+ qualify doctor --role ci"
doctor_out=$("$PY" -m qualify doctor --role ci 2>&1)  # seconds long: not worth forwarding signals to
doctor_code=$?
echo "$doctor_out"
{
  echo "<details><summary>qualify doctor: exit ${doctor_code} ($(meaning "$doctor_code"))</summary>"
  echo
  echo '```'
  echo "$doctor_out"
  echo '```'
  echo "</details>"
  echo
} >>"$SUMMARY"
if [ "$doctor_code" -ne 0 ]; then
  annotate error "qualify doctor" "this runner cannot qualify (exit ${doctor_code}: $(meaning "$doctor_code"))"
  record_code "$doctor_code"
  finish
fi

if [ "${QUALIFY_GPU_TESTS:-1}" != 0 ]; then
  echo "+ QUALIFY_REQUIRE_GPU=1 pytest -m gpu"
  QUALIFY_REQUIRE_GPU=1 interruptible "$PY" -m pytest -q -m gpu -p no:cacheprovider
  tests_code=$?
  stop_if_interrupted
  if [ "$tests_code" -ne 0 ]; then
    # a runner that passed doctor and still fails qualify's own GPU tests cannot be trusted with a verdict
    annotate error "gpu tests" "pytest -m gpu failed (pytest exit ${tests_code}); no protocol was qualified"
    echo "GPU tests failed (pytest exit ${tests_code}); no protocol was qualified." >>"$SUMMARY"
    record_code 70
    finish
  fi
fi

# -- which protocols ---------------------------------------------------------------------------
config() {  # config NAME FIELD: one field of a compare entry in .github/qualify-ci.json, or nothing
  "$PY" - "$CONFIG" "$1" "$2" <<'PYTHON'
import json, sys
entry = json.load(open(sys.argv[1])).get("compare", {}).get(sys.argv[2])
if entry is not None:
    value = entry[sys.argv[3]]
    print("\n".join(value) if isinstance(value, list) else value)
PYTHON
}

plans=()
if [ -n "${QUALIFY_PROTOCOL:-}" ]; then
  case "$QUALIFY_PROTOCOL" in
    */* | .* | "") annotate error "protocol" "not a protocol name: ${QUALIFY_PROTOCOL}"; record_code 2; finish ;;
  esac
  plans=("protocols/${QUALIFY_PROTOCOL}/plan.json")
else
  sources=()
  while IFS= read -r name; do
    while IFS= read -r path; do sources+=(--sources "${name}=${path}"); done < <(config "$name" sources)
  done < <("$PY" -c 'import json,sys; print("\n".join(json.load(open(sys.argv[1])).get("compare", {})))' "$CONFIG")
  listed=$("$PY" -m qualify changed --base "${QUALIFY_BASE:-origin/main}" ${sources[@]+"${sources[@]}"})
  code=$?
  if [ "$code" -ne 0 ]; then record_code "$code"; finish; fi
  while IFS= read -r plan; do [ -n "$plan" ] && plans+=("$plan"); done <<<"$listed"
fi

if [ "${#plans[@]}" -eq 0 ]; then
  echo "No protocol is touched by this change: nothing to qualify." | tee -a "$SUMMARY"
  finish
fi

# -- qualify each ------------------------------------------------------------------------------
for plan in "${plans[@]}"; do
  name=$(basename "$(dirname "$plan")")
  record="$OUT/$name"
  build=$(config "$name" build)
  if [ -n "$build" ]; then
    mapfile -t argv <<<"$build"
    echo "+ ${argv[*]}"
    if ! interruptible "${argv[@]}"; then
      stop_if_interrupted
      annotate error "$name" "building the libraries failed (${argv[*]})"
      echo "**${name}**: building the libraries failed (\`${argv[*]}\`): exit 4 ($(meaning 4))." >>"$SUMMARY"
      record_code 4
      continue
    fi
    echo "+ qualify compare ... --plan $plan --record $record"
    qualify compare "$(config "$name" base)" "$(config "$name" candidate)" --plan "$plan" --record "$record"
  else
    echo "+ qualify run $plan --record $record"
    qualify run "$plan" --record "$record"
  fi
  code=$?
  record_code "$code"
  if [ -f "$record/results.json" ]; then
    qualify summary "$record" -o "$SUMMARY" >/dev/null
    if [ "$interrupted" -eq 0 ] && ! qualify report --check "$record"; then
      annotate error "$name" "the record does not reproduce from its raw samples (qualify report --check)"
      record_code 70
    fi
  else
    echo "**${name}**: no record: exit ${code} ($(meaning "$code")); the job's log has the reason." >>"$SUMMARY"
  fi
  if [ "$code" -ne 0 ]; then
    annotate error "$name" "exit ${code}: $(meaning "$code")"
  fi
  echo >>"$SUMMARY"
  stop_if_interrupted  # the interrupted protocol's record and summary are kept; the next does not start
done

finish
