#!/usr/bin/env bash
# Everything dgrr checks on a GPU, in one command, for a machine lent with one
# (the device tool: build here, carry the build folder, run this there):
#   scripts/gpu-checks.sh BUILD OUTDIR
# 1. the tests that skip without a device (device Philox, device fingerprints
#    of single buffers and of segment lists, the asynchronous device recording
#    of tensors and parameters, device copies, cuBLAS handles, the NCCL
#    communicator), listed by name with their verdicts;
# 2. the device fingerprint against a device-to-device copy (bench);
# 3. nvidia-smi and the library versions, for the figures' record;
# 4. dgrr.torch's CUDA tests, where an interpreter has torch with CUDA.
# Logs go to OUTDIR (gpu-tests.log, python-cuda.log, device-fingerprint.txt,
# machine.txt).
# Exit status: the tests' (non-zero when one failed).
set -uo pipefail
build=${1:?usage: scripts/gpu-checks.sh BUILD OUTDIR}
out=${2:?usage: scripts/gpu-checks.sh BUILD OUTDIR}
mkdir -p "$out"
{
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv 2>&1
  echo "nvcc (build machine) and runtime libraries:"
  ldd "$build/tests/runtime/runtime_test" 2>&1 | grep -E 'cuda|nccl|cublas' || true
} > "$out/machine.txt"
# The device tests by name: they are the ones whose point is the GPU.
pattern='Cuda|Device|Nccl|Cublas|GpuInfo'
ctest --test-dir "$build" -R "$pattern" --output-on-failure -j 4 2>&1 | tee "$out/gpu-tests.log"
tests_rc=${PIPESTATUS[0]}
# A test that still skips on a GPU machine is a finding too.
grep -E '\(Skipped\)' "$out/gpu-tests.log" > "$out/still-skipped.txt" || true
# 4. dgrr.torch with a CUDA torch: recording and registered state of a model
#    on the GPU (the binding is built for one CPython; another interpreter
#    cannot load it, which the log then says).
if [[ -d "$build/python/dgrr" ]]; then
  for py in python3 /usr/bin/python3; do
    if "$py" -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null; then
      PYTHONPATH="$build/python" "$py" -m pytest -q -rs tests/python/test_torch.py -k cuda \
        2>&1 | tee "$out/python-cuda.log"
      ((PIPESTATUS[0] == 0)) || tests_rc=1
      break
    fi
  done
fi
if [[ -x "$build/bench/fingerprint/device_fingerprint_bench" ]]; then
  "$build/bench/fingerprint/device_fingerprint_bench" 15 1 16 256 4096 2>&1 | tee "$out/device-fingerprint.txt"
fi
exit "$tests_rc"
