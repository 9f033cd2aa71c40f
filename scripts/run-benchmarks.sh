#!/usr/bin/env bash
# `make bench`: every benchmark of a Release build, each with its baseline
# measured in the same run (figures and methods: bench/README.md).
#
#   scripts/run-benchmarks.sh [BUILD_DIR] [OUT_DIR]
#
# Google Benchmark binaries write JSON to OUT_DIR (default BUILD_DIR/bench-results)
# and a table to the terminal; the recording-overhead run pairs every
# recording mode with --mode off on tiny and small. The PyTorch comparisons
# (bench/model/compare_torch.sh, bench/fingerprint/compare_torch.sh) and the
# dgrr.torch benchmarks run with the torch 2.11 environment and are skipped
# with a line saying so when there is no torch.
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

# The torch runs use the environment scripts/install-deps.sh makes (torch
# 2.11), or DGRR_TORCH_PYTHON; /usr/bin/python3 when neither is there.
py=${DGRR_TORCH_PYTHON:-/opt/dgrr/venv-torch/bin/python}
[ -x "$py" ] || py=/usr/bin/python3
if "$py" -c 'import torch' 2>/dev/null; then
  export DGRR_TORCH_PYTHON=$py
  run "model vs PyTorch" "$(dirname "$0")/../bench/model/compare_torch.sh" "$build" 3
  run "fingerprint vs torch.sum" "$(dirname "$0")/../bench/fingerprint/compare_torch.sh" "$build"
  if [ -d "$build/python/dgrr" ]; then
    bp="$(dirname "$0")/../bench/python"
    run "dgrr.torch recording overhead" "$py" "$bp/recording_overhead.py" "$build"
    run "dgrr.torch recording overhead, paired steps" "$py" "$bp/paired_overhead.py" "$build"
    run "nanoGPT with gradient accumulation: overhead by mode" \
      env PYTHONPATH="$build/python" "$py" "$bp/nanogpt_overhead.py"
    run "nanoGPT with gradient accumulation: overhead paired step by step in one process" \
      env PYTHONPATH="$build/python" "$py" "$bp/nanogpt_overhead.py" --steps 60 \
      --paired plain,off,sdc,trusted,full,full-pure,full-hooks
    run "dgrr full vs torch DebugMode" \
      env PYTHONPATH="$build/python" "$py" "$bp/debugmode_compare.py" --cli "$build/cli/dgrr"
    run "DDP: dgrr's comm hook vs DDP's all-reduce" "$py" "$bp/ddp_overhead.py" "$build"
    run "checkpoint write+restore: dgrr vs torch.distributed.checkpoint" \
      "$py" "$bp/checkpoint_vs_dcp.py" "$build"
  else
    echo "bench: $build/python/dgrr is not built: dgrr.torch overhead skipped" >&2
  fi
else
  echo
  echo "== PyTorch comparisons skipped: $py has no torch (make deps installs it)"
fi

if ((${#failed[@]})); then
  echo "bench: failed: ${failed[*]}" >&2
  exit 1
fi
echo
echo "bench: all done; JSON in $out"
