# Sourced by the CI scripts: qualify's exit-code table (README), and how several codes combine.
# shellcheck shell=bash

meaning() {
  case "$1" in
    0) echo "qualified" ;; 1) echo "not qualified" ;; 2) echo "bad plan, record or command line" ;;
    3) echo "a frozen input changed, or a record would be overwritten" ;; 4) echo "build failed" ;;
    5) echo "device or environment" ;; 6) echo "external tool missing or failed" ;;
    7) echo "incomplete: the evidence cannot decide" ;; 70) echo "internal error in qualify" ;;
    130) echo "interrupted" ;; *) echo "unexpected exit code" ;;
  esac
}

# Over several protocols the most severe code is the job's: an interruption or a bug says nothing
# about the kernels; a runner problem (5, 6) or an input problem (4, 3, 2) leaves the question
# open; then incomplete evidence (7); a verdict (1, 0) only when everything else ran.
rank() {
  case "$1" in
    0) echo 0 ;; 1) echo 1 ;; 7) echo 2 ;; 2) echo 3 ;; 3) echo 4 ;; 4) echo 5 ;; 6) echo 6 ;; 5) echo 7 ;;
    70) echo 8 ;; 130) echo 9 ;; *) echo 8 ;;
  esac
}

FINAL=0
record_code() {
  if [ "$(rank "$1")" -gt "$(rank "$FINAL")" ]; then FINAL=$1; fi
}

annotate() {  # annotate LEVEL TITLE MESSAGE: a line on the run's page, and the same line in the log
  echo "::$1 title=$2::$3"
}

finish() {
  echo "$(basename "$0"): exit $FINAL ($(meaning "$FINAL"))"
  exit "$FINAL"
}
