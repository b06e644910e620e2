#!/usr/bin/env bash
# The identical-code benchmark (issue 14): `qualify compare` on two byte-different builds of the
# attention library's base whose machine code is the same. Run on the GPU machine from the
# repository root, after `source .gpu/setup.sh`:
#   benchmarks/identical-code/run.sh [OUT]        (OUT defaults to $OUT, else /tmp/identical-code)
# Writes OUT/compare.txt (qualify's output), OUT/README.md and OUT/results.json (the record) and
# OUT/summary.txt, whose last line must read:
#   code: identical machine code for sm_90 in both libraries (launches not known to match)
set -uo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
out="$(mkdir -p "${1:-${OUT:-/tmp/identical-code}}" && cd "${1:-${OUT:-/tmp/identical-code}}" && pwd)"
cd "$root"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
benchmarks/identical-code/build_pair.sh "$work" > "$out/build.log" 2>&1 || { cat "$out/build.log" >&2; exit 1; }
a="$work/a/libattention_base.so" b="$work/b/libattention_base.so"
# one trial of the frozen library plan (6 cases, A/A control on): enough to show the spread
python3 -m qualify compare "$a" "$b" --plan protocols/attention-wide-entry/plan.json \
  --record "$work/record" --trials 1 > "$out/compare.txt" 2>&1
rc=$?
cp "$work/record/README.md" "$work/record/results.json" "$out/" 2>/dev/null
python3 - "$a" "$b" "$work/record/results.json" "$rc" > "$out/summary.txt" <<'PY'
import hashlib, json, sys
a, b, results, rc = sys.argv[1:]
digest = lambda p: hashlib.sha256(open(p, "rb").read()).hexdigest()[:16]
print(f"base build      {digest(a)}  candidate build {digest(b)}  (byte-different: {digest(a) != digest(b)})")
print(f"qualify compare exit code {rc}")
trial = json.load(open(results))["trials"][-1]
code = trial["code"]
for case in trial["cases"]:
    aa = case["aa"]["delta_pct"] if case.get("aa") else None
    print(f"{case['case']:>8}  candidate/base {case['stats']['delta_pct']:+.2f} %  A/A {aa:+.2f} %" if aa is not None
          else f"{case['case']:>8}  candidate/base {case['stats']['delta_pct']:+.2f} %")
if code["status"] == "identical":
    known = "launches match" if code["launches_match"] else "launches not known to match"
    print(f"code: identical machine code for {code['arch']} in both libraries ({known})")
else:
    print(f"code: {code['status']} for {code['arch']}: {code.get('reason') or '; '.join(code['differences'])}")
PY
cat "$out/summary.txt"
