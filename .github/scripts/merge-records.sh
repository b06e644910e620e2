#!/usr/bin/env bash
# The fleet's last job: merge each protocol's records from every GPU runner into one record with a
# table per device (`qualify report --merge`), and summarise it.
#   merge-records.sh DOWNLOADED MERGED
# DOWNLOADED holds one folder per runner (the artifacts qualify-records-<label>), each holding one
# record folder per protocol; MERGED/<protocol> is written and must not exist yet.
# Exit code: the most severe over the merged records (see exit-codes.sh); no record at all is 7.
set -uo pipefail
cd "$(dirname "$0")/../.."
. .github/scripts/exit-codes.sh

DOWNLOADED=${1:?usage: merge-records.sh DOWNLOADED MERGED}
MERGED=${2:?usage: merge-records.sh DOWNLOADED MERGED}
PY=${QUALIFY_PYTHON:-python3}
SUMMARY=${GITHUB_STEP_SUMMARY:-/dev/stdout}
qualify() { "$PY" -m qualify "$@"; }

echo "## qualify: the fleet's records merged" >>"$SUMMARY"
echo >>"$SUMMARY"
names=$(find "$DOWNLOADED" -mindepth 3 -maxdepth 3 -name results.json -printf '%h\n' | xargs -r -n1 basename | sort -u)
if [ -z "$names" ]; then
  echo "No runner uploaded a record: nothing to merge." >>"$SUMMARY"
  annotate error "merge" "no runner uploaded a record"
  record_code 7
  finish
fi
while IFS= read -r name; do
  sources=()
  for folder in "$DOWNLOADED"/*/"$name"; do
    [ -f "$folder/results.json" ] && sources+=("$folder")
  done
  echo "+ qualify report --merge $MERGED/$name ${sources[*]}"
  qualify report --merge "$MERGED/$name" "${sources[@]}"
  code=$?
  if [ "$code" -ne 0 ]; then
    annotate error "$name" "merging failed: exit ${code} ($(meaning "$code"))"
    record_code "$code"
    continue
  fi
  qualify summary "$MERGED/$name" -o "$SUMMARY" >/dev/null
  code=$?
  record_code "$code"
  [ "$code" -ne 0 ] && annotate error "$name" "merged verdict: exit ${code} ($(meaning "$code"))"
  echo >>"$SUMMARY"
done <<<"$names"
finish
