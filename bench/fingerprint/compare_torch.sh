#!/bin/sh
# dgrr's fingerprint against torch.sum (1 and 2 threads) on the same 256 MiB
# float32 tensor, in one process, interleaved (compare_torch.py says how).
#   bench/fingerprint/compare_torch.sh [BUILD_DIR] [RUNS] [ROUNDS]
# Needs the fingerprint_torch_helper target built and a Python with torch:
# $DGRR_TORCH_PYTHON when set, else /opt/dgrr/venv-torch/bin/python when it
# exists, else /usr/bin/python3 with Debian's python3-torch
# (scripts/install-bench-deps.sh). torch runs on the CPU only.
# DGRR_BENCH_PREFETCH=none|near|near-paced|far picks the consumers' software
# prefetch (default auto: near on AMD, far elsewhere; fingerprint_simd.h).
set -eu
build=${1:-build}
runs=${2:-3}
rounds=${3:-15}
here=$(dirname "$0")
helper="$build/bench/fingerprint/libfingerprint_torch_helper.so"
[ -f "$helper" ] || {
  echo "compare_torch.sh: build $helper first (cmake --build $build --target fingerprint_torch_helper)" >&2
  exit 1
}
python=${DGRR_TORCH_PYTHON:-}
if [ -z "$python" ]; then
  if [ -x /opt/dgrr/venv-torch/bin/python ]; then python=/opt/dgrr/venv-torch/bin/python; else python=/usr/bin/python3; fi
fi
"$python" -c 'import torch' 2>/dev/null || {
  echo "compare_torch.sh: $python has no torch; set DGRR_TORCH_PYTHON or run scripts/install-bench-deps.sh" >&2
  exit 1
}
echo "# $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(nproc) CPUs, python $python"
r=1
while [ "$r" -le "$runs" ]; do
  "$python" "$here/compare_torch.py" --helper "$helper" --rounds "$rounds"
  r=$((r + 1))
done
