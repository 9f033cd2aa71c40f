#!/usr/bin/env bash
# Runs every fuzz target of a DGRR_FUZZ build for a bounded time.
#
#   fuzz/run-fuzzers.sh BUILD_DIR SECONDS_PER_TARGET [TARGET...]
#
# Each target reads its seeds (BUILD_DIR/fuzz-seeds/<target>, fuzz/make-seeds.sh)
# and grows its own corpus in BUILD_DIR/fuzz-corpus/<target>, kept between runs.
# A crash, a leak, an input slower than 10 s (-timeout) or one that takes more
# than 2 GiB (-rss_limit_mb) is a finding: the input is saved as
# BUILD_DIR/fuzz-findings/<target>-crash-..., and the script exits 1 after
# running the remaining targets. Logs: BUILD_DIR/fuzz-logs/<target>.log.
set -uo pipefail
build=${1:?usage: run-fuzzers.sh BUILD_DIR SECONDS [TARGET...]}
seconds=${2:?usage: run-fuzzers.sh BUILD_DIR SECONDS [TARGET...]}
shift 2
if (($# > 0)); then targets=("$@"); else mapfile -t targets <"$build/fuzz/targets.txt"; fi

mkdir -p "$build/fuzz-logs" "$build/fuzz-findings"
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=0}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
export LSAN_OPTIONS=${LSAN_OPTIONS:-suppressions=$(cd "$(dirname "$0")" && pwd)/lsan.supp:print_suppressions=0}
failed=()
total=0
printf '%-26s %12s %8s %8s %7s  %s\n' target executions cov ft corpus result
for t in "${targets[@]}"; do
  [ -n "$t" ] || continue
  corpus="$build/fuzz-corpus/$t"
  seeds="$build/fuzz-seeds/$t"
  mkdir -p "$corpus" "$seeds"
  log="$build/fuzz-logs/$t.log"
  extra=()
  case $t in
    # A real trace is hundreds of KiB; 64 records hold every record type and
    # a name split over chunks, and keep the target at thousands of runs/s.
    fuzz_trace_reader) extra=(-max_len=8192) ;;
  esac
  asan=$ASAN_OPTIONS
  case $t in
    # libhdf5 has no frame pointers: only the slow unwinder sees the libhdf5
    # frames that lsan.supp names.
    fuzz_checkpoint_* | fuzz_tensor_dump_* | fuzz_cli) asan=$asan:fast_unwind_on_malloc=0 ;;
  esac
  ASAN_OPTIONS=$asan "$build/fuzz/$t" "${extra[@]}" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
    -artifact_prefix="$build/fuzz-findings/$t-" "$corpus" "$seeds" >"$log" 2>&1
  rc=$?
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
  last=$(grep -E '^#[0-9]+[[:space:]]' "$log" | tail -1)
  cov=$(sed -n 's/.* cov: \([0-9]*\).*/\1/p' <<<"$last")
  ft=$(sed -n 's/.* ft: \([0-9]*\).*/\1/p' <<<"$last")
  corp=$(sed -n 's/.* corp: \([0-9]*\).*/\1/p' <<<"$last")
  result=ok
  if ((rc != 0)); then result="FINDING (exit $rc; see $log)"; failed+=("$t"); fi
  total=$((total + ${execs:-0}))
  printf '%-26s %12s %8s %8s %7s  %s\n' "$t" "${execs:-?}" "${cov:-?}" "${ft:-?}" "${corp:-?}" "$result"
done
echo "fuzz: $total executions in all"
if ((${#failed[@]} > 0)); then
  echo "fuzz: findings in ${failed[*]} (inputs in $build/fuzz-findings/)" >&2
  exit 1
fi
