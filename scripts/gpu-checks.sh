#!/usr/bin/env bash
# Everything dgrr checks on a GPU, in one command, for a machine lent with one
# (the device tool: scripts/gpu-prepare.sh here packs the build, and
# scripts/gpu-remote.sh there unpacks it and runs this):
#   scripts/gpu-checks.sh BUILD OUTDIR
# 1. the tests that skip without a device (device Philox, device fingerprints
#    of single buffers and of segment lists, the asynchronous device recording
#    of tensors and parameters, device copies, cuBLAS handles, the NCCL
#    communicator, the model's __global__ kernels against the CPU, `dgrr
#    train --device cuda` against cpu), listed by name with their verdicts;
# 2. `dgrr train --device cuda` against --device cpu, `dgrr compare` exit 0:
#    tiny (1 and 2 ranks), small, and resumes crossing cpu -> cuda -> cpu;
# 3. tokens/s of --device cuda with --gemm exact and --gemm cublas (and the
#    recording modes), each with its time per kernel (DGRR_KERNEL_TIMES);
# 4. the device fingerprint against a device-to-device copy (bench);
# 5. nvidia-smi and the library versions, for the figures' record;
# 6. dgrr.torch's CUDA tests, where an interpreter has torch with CUDA;
# then one table of every check.
# Rehearsal: DGRR_GPU_CHECKS_DEVICE=cuda-sim runs the same steps with the
# grid emulator in place of the GPU (and the emulator's own tests beside the
# device ones, a smaller small run: the emulator is slow), so that on the GPU
# only the device differs (docs/gpu.md).
# Logs go to OUTDIR (gpu-tests.log, train-*.log, python-cuda.log,
# device-fingerprint.txt, machine.txt, table.txt, and kernel-times.txt: where
# each throughput run's device time went, per kernel).
# Exit status: 0 when every check passed (or skipped with its reason).
set -uo pipefail
build=${1:?usage: scripts/gpu-checks.sh BUILD OUTDIR}
out=${2:?usage: scripts/gpu-checks.sh BUILD OUTDIR}
mkdir -p "$out"
{
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv 2>&1
  echo "nvcc (build machine) and runtime libraries:"
  ldd "$build/tests/runtime/runtime_test" 2>&1 | grep -E 'cuda|nccl|cublas' || true
  echo "host CPU and the vector kernels dgrr runs there (dgrr env):"
  grep -m1 'model name' /proc/cpuinfo || true
  "$build/cli/dgrr" env 2>&1 | sed -n '/^kernels/,/Philox/p' || true
} > "$out/machine.txt"
# The device tests by name: they are the ones whose point is the GPU.
device=${DGRR_GPU_CHECKS_DEVICE:-cuda}
case "$device" in
  cuda) pattern='Cuda|Device|Nccl|Cublas|GpuInfo' ;;
  cuda-sim) pattern='Cuda|Device|Nccl|Cublas|GpuInfo|GridKernels|GridEngine|EmulatedGrid' ;;
  *) echo "gpu-checks: DGRR_GPU_CHECKS_DEVICE must be cuda or cuda-sim, got '$device'" >&2; exit 1 ;;
esac
declare -a table=()
row() { table+=("$(printf '%-44s %-8s %s' "$1" "$2" "$3")"); }
ctest --test-dir "$build" -R "$pattern" --output-on-failure -j 4 2>&1 | tee "$out/gpu-tests.log"
tests_rc=${PIPESTATUS[0]}
row "device tests (ctest -R '$pattern')" "$( ((tests_rc == 0)) && echo pass || echo FAIL)" \
  "$(grep -Eo '[0-9]+% tests passed.* out of [0-9]+' "$out/gpu-tests.log" | tail -1); skipped: $(grep -c '(Skipped)' "$out/gpu-tests.log")"
# A test that still skips on a GPU machine is a finding too.
grep -E '\(Skipped\)' "$out/gpu-tests.log" > "$out/still-skipped.txt" || true
# 4. dgrr.torch with a CUDA torch: recording and registered state of a model
#    on the GPU (the binding is built for one CPython; another interpreter
#    cannot load it, which the log then says).
python_state=skipped python_row="no interpreter with a CUDA torch"
if [[ -d "$build/python/dgrr" ]]; then
  for py in python3 /usr/bin/python3; do
    if "$py" -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null; then
      PYTHONPATH="$build/python" "$py" -m pytest -q -rs tests/python/test_torch.py -k cuda \
        2>&1 | tee "$out/python-cuda.log"
      if ((PIPESTATUS[0] == 0)); then python_state=pass; else python_state=FAIL; tests_rc=1; fi
      python_row="$py -m pytest tests/python/test_torch.py -k cuda"
      break
    fi
  done
fi
row "dgrr.torch CUDA tests" "$python_state" "$python_row (python-cuda.log)"
if [[ -x "$build/bench/fingerprint/device_fingerprint_bench" && "$device" == cuda ]]; then
  "$build/bench/fingerprint/device_fingerprint_bench" 15 1 16 256 4096 2>&1 | tee "$out/device-fingerprint.txt"
  row "device fingerprint bench" "$( ((PIPESTATUS[0] == 0)) && echo ran || echo FAIL)" "device-fingerprint.txt"
fi

# 2. Training on the device against the CPU, certified by dgrr compare.
dgrr="$build/cli/dgrr"
runs="$out/runs"
rm -rf "$runs" && mkdir -p "$runs"
if [[ "$device" == cuda ]]; then
  small=(--model small --steps 2)
  timed=(--model small --steps 8)  # throughput: the first step's setup spread over 8
else
  small=(--model small --steps 1 --batch 4)  # the emulator runs every thread in turn
  timed=(--model small --steps 2 --batch 4)
fi
# train NAME ARGS...: one run, its log in train-NAME.log; rc in $?.
train() {
  local name=$1
  shift
  "$dgrr" train --out "$runs/$name" --quiet "$@" > "$out/train-$name.log" 2>&1
}
# check LABEL A B: dgrr compare A B, a table row.
check() {
  if "$dgrr" compare "$runs/$2" "$runs/$3" > "$out/compare-$3.log" 2>&1; then
    row "$1" pass "compare $2 $3: exit 0"
  else
    row "$1" FAIL "compare $2 $3: exit $? (compare-$3.log)"
    tests_rc=1
  fi
}
# cut RUN: drop the run's checkpoints from step 3 on (a resume starts at step 2).
cut() { rm -f "$runs/$1"/ckpt/step-0000000[3-9]*; }
pair() {  # pair LABEL NAME ARGS...: a cpu and a device run of ARGS, compared
  local label=$1 name=$2
  shift 2
  if ! train "$name-cpu" "$@"; then row "$label" FAIL "cpu run (train-$name-cpu.log)"; tests_rc=1; return; fi
  if ! train "$name-$device" "$@" --device "$device"; then
    row "$label" FAIL "$(head -1 "$out/train-$name-$device.log")"
    tests_rc=1
    return
  fi
  check "$label" "$name-cpu" "$name-$device"
}
pair "tiny, 1 rank: $device = cpu" tiny1 --steps 3
pair "tiny, 2 ranks, ckpts: $device = cpu" tiny2 --steps 4 --ranks 2 --ckpt-every 2
pair "small (${small[*]}): $device = cpu" small "${small[@]}"
if [[ -d "$runs/tiny2-$device" ]]; then
  cp -r "$runs/tiny2-cpu" "$runs/cpu-then-$device" && cut "cpu-then-$device"
  if train "cpu-then-$device" --resume --device "$device"; then
    check "resume cpu -> $device" tiny2-cpu "cpu-then-$device"
  else
    row "resume cpu -> $device" FAIL "$(head -1 "$out/train-cpu-then-$device.log")"
    tests_rc=1
  fi
  cp -r "$runs/tiny2-$device" "$runs/$device-then-cpu" && cut "$device-then-cpu"
  if train "$device-then-cpu" --resume --device cpu; then
    check "resume $device -> cpu" tiny2-cpu "$device-then-cpu"
  else
    row "resume $device -> cpu" FAIL "$(head -1 "$out/train-$device-then-cpu.log")"
    tests_rc=1
  fi
fi

# 3. Throughput: tokens/s of the small preset on the device and the CPU, per
# --gemm (cublas: deterministic run to run, not equal to cpu; refused where
# it is not built or not on cuda, which the row then says).
# Each run also writes where its device time went (DGRR_KERNEL_TIMES, one
# file per launcher), summed per kernel into kernel-times.txt
# (scripts/kernel-times.py); the row gives the whole run's rate (set-up and
# the first step included) and the median of the steps after the first
# (metrics.jsonl), the steady rate.
steps_timed=$(printf '%s\n' "${timed[@]}" | grep -A1 -- '--steps' | tail -1)
steady_rate() {  # steady_rate RUN: median tokens/s of steps >= 1, or "-"
  python3 - "$1/metrics.jsonl" <<'PY' 2>/dev/null || echo -
import json, statistics, sys
rates = [r["tokens_per_s"] for r in map(json.loads, open(sys.argv[1])) if r.get("step", 0) >= 1]
print(f"{statistics.median(rates):.0f}" if rates else "-")
PY
}
speed() {  # speed LABEL NAME ARGS...
  local label=$1 name=$2
  shift 2
  rm -rf "$out/kernel-times/$name"
  if DGRR_KERNEL_TIMES="$out/kernel-times/$name" "$dgrr" train --out "$runs/$name" --json --quiet "${timed[@]}" "$@" \
      > "$out/train-$name.json" 2> "$out/train-$name.log"; then
    local rate
    rate=$(grep -o '"tokens_per_s": *[0-9.e+]*' "$out/train-$name.json" | grep -o '[0-9.e+]*$')
    row "$label" ran "$(printf '%.0f' "$rate") tokens/s (steps after the first: $(steady_rate "$runs/$name"))"
    if [[ -d "$out/kernel-times/$name" ]]; then
      { echo "## $label (${timed[*]} $*)"
        python3 "$(dirname "$0")/kernel-times.py" --steps "$steps_timed" --top 16 "$out/kernel-times/$name" 2>&1
        echo; } >> "$out/kernel-times.txt"
    fi
  else
    row "$label" refused "$(head -1 "$out/train-$name.log")"
  fi
}
rm -f "$out/kernel-times.txt"
speed "tokens/s small, cpu" speed-cpu
speed "tokens/s small, $device --gemm exact" speed-exact --device "$device" --gemm exact
speed "tokens/s small, $device --gemm cublas" speed-cublas --device "$device" --gemm cublas
# What recording costs on the device: the same run (--gemm exact, whose
# full-mode figure is above) with each other recording mode.
for mode in off trusted sdc; do
  speed "tokens/s small, $device --mode $mode" "speed-$mode" --device "$device" --gemm exact --mode "$mode"
done
# cuBLAS's products on the pinned handle: the same bits run after run (not the cpu's).
if [[ -f "$runs/speed-cublas/config.json" ]]; then
  if train cublas-again "${timed[@]}" --device "$device" --gemm cublas; then
    check "--gemm cublas: run to run" speed-cublas cublas-again
  else
    row "--gemm cublas: run to run" FAIL "$(head -1 "$out/train-cublas-again.log")"
    tests_rc=1
  fi
fi

{
  echo "gpu-checks ($device) on $(hostname), $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  printf '%s\n' "${table[@]}"
} | tee "$out/table.txt"
exit "$tests_rc"
