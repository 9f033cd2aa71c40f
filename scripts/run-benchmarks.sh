#!/usr/bin/env bash
# `make bench`: every benchmark of a Release build, each with its baseline
# measured in the same run (figures and methods: bench/README.md).
#
#   scripts/run-benchmarks.sh [BUILD_DIR] [OUT_DIR]
#
# Google Benchmark binaries write JSON to OUT_DIR (default BUILD_DIR/bench-results)
# and a table to the terminal; the recording-overhead run pairs every
# recording mode with --mode off on tiny and small. The PyTorch comparisons
# (bench/model/compare_torch.sh, bench/fingerprint/compare_torch.sh) run when
# /usr/bin/python3 has torch (scripts/install-bench-deps.sh installs it) and
# are skipped with a line saying so otherwise.
set -uo pipefail
build=${1:-build}
out=${2:-$build/bench-results}
mkdir -p "$out"
echo "# $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(nproc) CPUs, load $(cut -d' ' -f1-3 /proc/loadavg)"
failed=()

run() {  # run NAME COMMAND...
  local name=$1
  shift
  echo
  echo "== $name"
  if ! "$@"; then
    echo "bench: $name failed" >&2
    failed+=("$name")
  fi
}

for bin in rng/rng_bench fingerprint/fingerprint_bench trace_format/trace_format_bench \
           checkpoint/checkpoint_bench replay/replay_bench replay/compare_bench \
           model/model_bench model/resume_cost_bench; do
  path="$build/bench/$bin"
  name=$(basename "$bin")
  if [ ! -x "$path" ]; then
    echo "bench: $path is not built (cmake --build $build)" >&2
    failed+=("$name")
    continue
  fi
  run "$name" "$path" --benchmark_repetitions=3 --benchmark_report_aggregates_only=true \
    --benchmark_out="$out/$name.json" --benchmark_out_format=json
done

# CanonicalAllReduce vs MPI_Allreduce under mpirun -np 1, 2, 4 (MPI builds only).
if [[ -x $build/bench/collective/collective_bench ]]; then
  run "canonical all-reduce vs MPI_Allreduce" "$(dirname "$0")/../bench/collective/run.sh" "$build"
fi
overhead="$build/bench/model/recording_overhead"
run "recording_overhead tiny" "$overhead" --model tiny --steps 40 --rounds 5 --out "$out/overhead-tiny"
run "recording_overhead small" "$overhead" --model small --steps 12 --rounds 3 --threads 2 --out "$out/overhead-small"

if /usr/bin/python3 -c 'import torch' 2>/dev/null; then
  run "model vs PyTorch" "$(dirname "$0")/../bench/model/compare_torch.sh" "$build" 3
  run "fingerprint vs torch.sum" "$(dirname "$0")/../bench/fingerprint/compare_torch.sh" "$build"
  if [ -d "$build/python/dgrr" ]; then
    run "dgrr.torch recording overhead" /usr/bin/python3 "$(dirname "$0")/../bench/python/recording_overhead.py" "$build"
    run "dgrr.torch recording overhead, paired steps" /usr/bin/python3 "$(dirname "$0")/../bench/python/paired_overhead.py" "$build"
  else
    echo "bench: $build/python/dgrr is not built: dgrr.torch overhead skipped" >&2
  fi
else
  echo
  echo "== PyTorch comparisons skipped: /usr/bin/python3 has no torch (run scripts/install-bench-deps.sh)"
fi

if ((${#failed[@]})); then
  echo "bench: failed: ${failed[*]}" >&2
  exit 1
fi
echo
echo "bench: all done; JSON in $out"
