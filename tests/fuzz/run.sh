#!/usr/bin/env bash
# Runs the libFuzzer targets of build-fuzz/ (configured by `make fuzz`) for SECONDS each, from
# their corpora in tests/fuzz/corpus/<target>/ (read-only: what a run discovers goes to a
# temporary directory), JOBS at a time. Prints each target's run count; exits non-zero when a
# target crashes (its reproducer is saved as build-fuzz/artifacts/<target>-crash-*).
#   tests/fuzz/run.sh SECONDS [TARGET ...]        (default: every target built)
set -uo pipefail
cd "$(dirname "$0")/../.."
secs=${1:?usage: run.sh SECONDS [TARGET ...]}
shift
targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
  for f in build-fuzz/tests/fuzz_*; do [ -x "$f" ] && targets+=("$(basename "$f")"); done
fi
mkdir -p build-fuzz/artifacts build-fuzz/logs
export LLMBUS_SOURCE_DIR=$PWD
one() {
  t=$1
  work=$(mktemp -d)
  seeds=()
  [ -d tests/fuzz/corpus/"$t" ] && seeds+=(tests/fuzz/corpus/"$t")
  # the GGUF seed is generated (no model-format binaries in git)
  [ "$t" = fuzz_gguf ] && python3 tests/fuzz/make_gguf_seed.py "$work/tiny.gguf"
  build-fuzz/tests/"$t" -max_total_time="$secs" -timeout=20 -rss_limit_mb=3072 -print_final_stats=1 \
    -artifact_prefix=build-fuzz/artifacts/"$t"- "$work" "${seeds[@]}" >build-fuzz/logs/"$t".log 2>&1
  rc=$?
  rm -rf "$work"
  runs=$(sed -n 's/^stat::number_of_executed_units: *//p' build-fuzz/logs/"$t".log)
  if [ $rc -eq 0 ]; then
    echo "fuzz $t: ${runs:-?} runs in ${secs} s, no crash"
  else
    echo "fuzz $t: FAILED (exit $rc) after ${runs:-?} runs; log build-fuzz/logs/$t.log:"
    grep -E "ERROR|SUMMARY|^    #[0-9]" build-fuzz/logs/"$t".log | head -20
  fi
  return $rc
}
export -f one
export secs
printf '%s\n' "${targets[@]}" | xargs -P "${JOBS:-2}" -I{} bash -c 'one {}'
