#!/bin/sh
# From nothing to the first green signal: clone, venv, pip install, a cold `plan check` (an empty
# compile cache). Usage: benchmarks/first-run/measure.sh [REPO] [FOLDER]; prints the load before and after.
uptime
start=$(date +%s.%N)
git clone -q "${1:-.}" "${2:-/tmp/qualify-first-run}" && cd "${2:-/tmp/qualify-first-run}" && python3 -m venv .venv && .venv/bin/python -m pip install -q -e ".[cu13]" >/dev/null 2>&1
mid=$(date +%s.%N)
QUALIFY_CACHE_DIR="${2:-/tmp/qualify-first-run}-cache" .venv/bin/qualify plan check protocols/vecload/plan.json > /dev/null; rc=$?
end=$(date +%s.%N)
echo "rc=$rc install=$(echo "$mid - $start" | bc) s check=$(echo "$end - $mid" | bc) s total=$(echo "$end - $start" | bc) s"
uptime
