#!/bin/sh
# dgrr's reference trainer against PyTorch on CPU, same GPT shape (`small`),
# 1 and 2 threads, interleaved so both see the same machine load; then one
# summary line per thread count: median and range of tokens per CPU-second
# (the figure to trust on a shared machine) and of wall tokens/s, and the
# ratio of the medians.
#   bench/model/compare_torch.sh [BUILD_DIR] [ROUNDS] [THREADS...]
# Needs BUILD_DIR/bench/model/model_bench and a Python with torch: the one
# $DGRR_TORCH_PYTHON names, else /opt/dgrr/venv-torch/bin/python when
# present (torch 2.11 CPU), else /usr/bin/python3 (Debian's python3-torch
# with OpenBLAS, scripts/install-bench-deps.sh).
set -eu
build=${1:-build}
rounds=${2:-3}
[ $# -ge 2 ] && shift 2 || shift $#
thread_counts=${*:-1 2}
here=$(dirname "$0")
bench="$build/bench/model/model_bench"
if [ -n "${DGRR_TORCH_PYTHON:-}" ]; then
  python=$DGRR_TORCH_PYTHON
elif [ -x /opt/dgrr/venv-torch/bin/python ]; then
  python=/opt/dgrr/venv-torch/bin/python
else
  python=/usr/bin/python3
fi
[ -x "$bench" ] || { echo "compare_torch.sh: build $bench first (cmake --build $build --target model_bench)" >&2; exit 1; }
"$python" -c 'import torch' 2>/dev/null || {
  echo "compare_torch.sh: $python has no torch (set DGRR_TORCH_PYTHON, or run scripts/install-bench-deps.sh)" >&2; exit 1; }
results=$(mktemp)
trap 'rm -f "$results"' EXIT
echo "# $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(nproc) CPUs, load $(cut -d' ' -f1-3 /proc/loadavg), torch from $python"
# The vector paths each side runs (DGRR_MAX_ISA caps dgrr's, docs/environment.md;
# ATEN_CPU_CAPABILITY and MKL_ENABLE_INSTRUCTIONS cap torch's).
dgrr_isa=$("$build/cli/dgrr" env 2>/dev/null | sed -n 's/^ *model products and layers: *//p')
torch_isa=$("$python" -c 'import torch; print(torch.backends.cpu.get_cpu_capability())' 2>/dev/null || echo unknown)
echo "# instruction set: dgrr ${dgrr_isa:-unknown} (DGRR_MAX_ISA=${DGRR_MAX_ISA:-unset}), torch $torch_isa (MKL_ENABLE_INSTRUCTIONS=${MKL_ENABLE_INSTRUCTIONS:-unset})"
r=1
while [ "$r" -le "$rounds" ]; do
  for threads in $thread_counts; do
    "$python" "$here/torch_gpt.py" --threads "$threads" --steps 20 | tee -a "$results"
    # tokens per step = 16 x 64 = 1024; Time is wall ms/step, CPU is process ms/step
    "$bench" --benchmark_filter="BM_TrainStep/small/$threads/" --benchmark_min_time=3 2>/dev/null |
      awk -v t="$threads" '/BM_TrainStep/ {
        printf "{\"system\": \"dgrr\", \"threads\": %d, \"tokens_per_s_wall\": %d, \"cpu_s_per_step\": %.5f, \"tokens_per_cpu_s\": %d}\n",
               t, 1024000 / $2, $4 / 1000, 1024000 / $4 }' | tee -a "$results"
  done
  r=$((r + 1))
done
echo "# load after: $(cut -d' ' -f1-3 /proc/loadavg)"
# Summary: per thread count, median [min..max] over the rounds.
"$python" - "$results" <<'EOF'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
def stats(system, threads, key):
    v = sorted(r[key] for r in rows if r["system"] == system and r["threads"] == threads)
    return (statistics.median(v), v[0], v[-1]) if v else None
for t in sorted({r["threads"] for r in rows}):
    line = {"threads": t}
    for key in ("tokens_per_cpu_s", "tokens_per_s_wall"):
        d, p = stats("dgrr", t, key), stats("torch", t, key)
        if d and p:
            line[key] = {"dgrr": [round(x) for x in d], "torch": [round(x) for x in p],
                         "ratio_of_medians": round(d[0] / p[0], 2)}
    print("# summary (median, min, max):", json.dumps(line))
EOF
