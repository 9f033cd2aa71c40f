#!/bin/sh
# dgrr's reference trainer against PyTorch on CPU, same GPT shape (`small`),
# 1 and 2 threads, interleaved so both see the same machine load.
#   bench/model/compare_torch.sh [BUILD_DIR] [ROUNDS]
# Needs build/bench/model/model_bench and /usr/bin/python3 with Debian's
# python3-torch and OpenBLAS (scripts/install-bench-deps.sh).
set -eu
build=${1:-build}
rounds=${2:-3}
here=$(dirname "$0")
bench="$build/bench/model/model_bench"
[ -x "$bench" ] || { echo "compare_torch.sh: build $bench first (cmake --build $build --target model_bench)" >&2; exit 1; }
/usr/bin/python3 -c 'import torch' 2>/dev/null || {
  echo "compare_torch.sh: /usr/bin/python3 has no torch; run scripts/install-bench-deps.sh" >&2; exit 1; }
echo "# $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(nproc) CPUs, load $(cut -d' ' -f1-3 /proc/loadavg)"
r=1
while [ "$r" -le "$rounds" ]; do
  for threads in 1 2; do
    /usr/bin/python3 "$here/torch_gpt.py" --threads "$threads" --steps 20
    # tokens per step = 16 x 64 = 1024; Time is wall ms/step, CPU is process ms/step
    "$bench" --benchmark_filter="BM_TrainStep/small/$threads/" --benchmark_min_time=3 2>/dev/null |
      awk -v t="$threads" '/BM_TrainStep/ {
        printf "{\"system\": \"dgrr\", \"threads\": %d, \"tokens_per_s_wall\": %d, \"cpu_s_per_step\": %.5f, \"tokens_per_cpu_s\": %d}\n",
               t, 1024000 / $2, $4 / 1000, 1024000 / $4 }'
  done
  r=$((r + 1))
done
