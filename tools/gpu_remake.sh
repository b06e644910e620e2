#!/usr/bin/env bash
# Re-make committed records from scratch on a GPU host and check each one; for the lent GPU machine:
#   source .gpu/setup.sh && tools/gpu_remake.sh "$OUT" [protocol ...]
# Each record folder is removed first (a re-run would add trials to the old record, within its
# budget), then qualified as the README says (run, or compare for the library protocols of
# .github/qualify-ci.json), then `report --check`ed. The records come back as one archive
# ($1/records.tgz) with a log ($1/remake.log); a protocol's exit code is printed, never hidden.
set -uo pipefail
cd "$(dirname "$0")/.."
out=${1:?usage: tools/gpu_remake.sh OUTDIR [protocol ...]}
shift
protocols=("$@")
[ ${#protocols[@]} -gt 0 ] || protocols=(vecload softmax attention-wide qsa-keyload fp8-rowsum attention-wide-entry)
log=$out/remake.log
PATH=$PATH:/usr/local/cuda/bin
for p in "${protocols[@]}"; do
  start=$SECONDS
  rm -rf "records/$p"
  entry=$(python3 -c 'import json,sys; e=json.load(open(".github/qualify-ci.json"))["compare"].get(sys.argv[1]); print("" if e is None else "\t".join([" ".join(e["build"]), e["base"], e["candidate"]]))' "$p")
  if [ -n "$entry" ]; then
    IFS=$'\t' read -r build base cand <<<"$entry"
    $build >>"$log" 2>&1 || echo "$p: build failed" | tee -a "$log"
    python3 -m qualify compare "$base" "$cand" --plan "protocols/$p/plan.json" --record "records/$p" >>"$log" 2>&1
  else
    python3 -m qualify run "protocols/$p/plan.json" >>"$log" 2>&1
  fi
  code=$?
  python3 -m qualify report --check "records/$p" >>"$log" 2>&1
  check=$?
  printf '%-22s exit %3s  check %s  %4d s\n' "$p" "$code" "$check" "$((SECONDS - start))" | tee -a "$log"
done
tar czf "$out/records.tgz" records
