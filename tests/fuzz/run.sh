#!/usr/bin/env bash
# Runs the libFuzzer targets of build-fuzz/ (configured by `make fuzz`) for SECONDS each, from
# their corpora in tests/fuzz/corpus/<target>/ (read-only: what a run discovers goes to a
# temporary directory), JOBS at a time. Each input may take FUZZ_TIMEOUT seconds (default 1) and
# the process FUZZ_RSS_MB of memory (default 2048): an input built to be costly is a finding,
# as a crash is. Prints each target's run count; exits non-zero when a target crashes, times out
# or runs out of memory (its reproducer is saved as build-fuzz/artifacts/<target>-*).
#   tests/fuzz/run.sh SECONDS [TARGET ...]        (default: every target built)
# FUZZ_RUNS=N runs each target for N executions instead (SECONDS is then ignored): the recorded
# runs of tests/fuzz/README.md.
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
  # the GGUF seeds are generated (no model-format binaries in git)
  [ "$t" = fuzz_gguf ] && python3 tests/fuzz/make_gguf_seed.py "$work/tiny.gguf"
  if [ "$t" = fuzz_mmproj ] && [ -x .venv/bin/python ]; then
    .venv/bin/python tests/tools/make_mmproj.py "$work/tiny-mmproj.gguf" --shape tiny-mlp --layers 1 --dtype f16
  fi
  if [ -n "${FUZZ_RUNS:-}" ]; then limit=(-runs="$FUZZ_RUNS"); else limit=(-max_total_time="$secs"); fi
  build-fuzz/tests/"$t" "${limit[@]}" -timeout="${FUZZ_TIMEOUT:-1}" -rss_limit_mb="${FUZZ_RSS_MB:-2048}" \
    -print_final_stats=1 \
    -artifact_prefix=build-fuzz/artifacts/"$t"- "$work" "${seeds[@]}" >build-fuzz/logs/"$t".log 2>&1
  rc=$?
  rm -rf "$work"
  runs=$(sed -n 's/^stat::number_of_executed_units: *//p' build-fuzz/logs/"$t".log)
  if [ $rc -eq 0 ]; then
    echo "fuzz $t: ${runs:-?} runs in $(sed -n 's/^Done [0-9]* runs in \([0-9]*\) second.*/\1/p' build-fuzz/logs/"$t".log) s, no crash"
  else
    echo "fuzz $t: FAILED (exit $rc) after ${runs:-?} runs; log build-fuzz/logs/$t.log:"
    grep -E "ERROR|SUMMARY|^    #[0-9]" build-fuzz/logs/"$t".log | head -20
  fi
  return $rc
}
export -f one
export secs FUZZ_RUNS
printf '%s\n' "${targets[@]}" | xargs -P "${JOBS:-2}" -I{} bash -c 'one {}'
