#!/usr/bin/env bash
# The CPU figures of bench/README.md's first section (issue 31), measured on
# the CPU this runs on, in one command (about 6 minutes on 2 idle cores; 12
# on a CPU with AVX-512, which runs each figure again on its AVX2 paths), so
# that a session on another CPU measures them all the same way:
#   scripts/cpu-figures.sh [BUILD] [OUTDIR]
# 1. the CPU, its vector set and the kernels dgrr runs (`dgrr env`);
# 2. FingerprintBytes against one-thread torch.sum on the same 256 MiB
#    tensor (bench/fingerprint/compare_torch.sh, CPU time), with each
#    software prefetch plan (DGRR_BENCH_PREFETCH: auto, none, near,
#    near-paced, far; fingerprint_simd.h);
# 3. VerifyTrace and the lockstep compare against read(2) of the same two
#    10 M-record traces (compare_bench BM_InterleavedRounds, 7 rounds): reads
#    shared with the read-ahead thread, the thread reading every piece, one
#    thread; by wall and by CPU;
# 4. the reference model `small` against torch on one thread
#    (bench/model/compare_torch.sh BUILD 5 1).
# Needs BUILD (default build) from `make build` (benchmarks included) and a
# Python with torch (/opt/dgrr/venv-torch from `make build`, or
# DGRR_TORCH_PYTHON); without torch, rows 2 and 4 say so. Logs and
# table.txt go to OUTDIR (default cpu-figures-HOST). Speed figures drift on
# a shared VM: run it on an idle machine, and compare only figures taken in
# the same run. Exit status 0 unless a benchmark failed to run.
set -uo pipefail
build=${1:-build}
out=${2:-cpu-figures-$(hostname)}
here=$(cd "$(dirname "$0")/.." && pwd)
mkdir -p "$out"
for need in "$build/cli/dgrr" "$build/bench/replay/compare_bench" "$build/bench/model/model_bench" \
  "$build/bench/fingerprint/libfingerprint_torch_helper.so"; do
  [[ -e "$need" ]] || { echo "cpu-figures: $need is missing: run make build (benchmarks on) first" >&2; exit 1; }
done
python=${DGRR_TORCH_PYTHON:-}
if [[ -z "$python" ]]; then
  if [[ -x /opt/dgrr/venv-torch/bin/python ]]; then python=/opt/dgrr/venv-torch/bin/python; else python=python3; fi
fi
have_torch=yes
"$python" -c 'import torch' 2>/dev/null || have_torch=no
failed=0
declare -a table=()
row() { table+=("$(printf '%-52s %s' "$1" "$2")"); }

cpu=$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')
flags=$(grep -m1 '^flags' /proc/cpuinfo)
vectors=$(for f in avx2 fma avx512f avx512vl avx512bw vpclmulqdq sha_ni; do
  [[ " $flags " == *" $f "* ]] && printf '%s ' "$f"; done)
{
  echo "$cpu, $(nproc) CPUs, $(grep -m1 'cpu family' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //') family,"\
       "model $(grep -m1 '^model[[:space:]]' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')"
  echo "vector set: $vectors"
  lscpu 2>/dev/null | grep -E 'L1d|L2|L3' || true
  "$build/cli/dgrr" env 2>&1 | sed -n '/^kernels/,/Philox/p'
  echo "date: $(date -u '+%Y-%m-%d %H:%M UTC'), load: $(cut -d' ' -f1-3 /proc/loadavg)"
  [[ $have_torch == yes ]] && "$python" -c 'import torch; print("torch", torch.__version__)'
} > "$out/machine.txt" 2>&1
cat "$out/machine.txt"

# The ISA caps to run: the CPU's own, and AVX2 where the CPU has more.
caps=(native)
[[ " $flags " == *" avx512f "* ]] && caps+=(avx2)
with_cap() {  # with_cap CAP COMMAND...: COMMAND with the kernels (and torch) held to CAP
  local cap=$1
  shift
  if [[ $cap == native ]]; then "$@"; else
    DGRR_MAX_ISA=$cap ATEN_CPU_CAPABILITY=$cap MKL_ENABLE_INSTRUCTIONS=AVX2 "$@"
  fi
}

for cap in "${caps[@]}"; do
  # 2. Fingerprints, one run of 9 rounds per prefetch plan.
  if [[ $have_torch == yes ]]; then
    for plan in auto none near near-paced far; do
      log="$out/fingerprint-$cap-$plan.log"
      if with_cap "$cap" env DGRR_BENCH_PREFETCH=$plan DGRR_TORCH_PYTHON="$python" \
        "$here/bench/fingerprint/compare_torch.sh" "$build" 1 9 > "$log" 2>&1; then
        row "fingerprint/torch.sum 1t, $cap, prefetch $plan" "$("$python" - "$log" <<'EOF'
import json, sys
got = {}
for line in open(sys.argv[1]):
    if line.startswith("{"):
        r = json.loads(line)
        if r.get("candidate") in ("FingerprintBytes", "read pass"):
            got[r["candidate"]] = r["cpu_vs_sum_1t"]
print(f"{got.get('FingerprintBytes', '?')}x (read pass {got.get('read pass', '?')}x), CPU time")
EOF
)"
      else
        failed=1
        row "fingerprint/torch.sum 1t, $cap, prefetch $plan" "FAILED (see $log)"
      fi
    done
  else
    row "fingerprint/torch.sum, $cap" "not run: $python has no torch"
  fi

  # 3. Verify and compare against read(2).
  log="$out/compare-bench-$cap.log"
  if with_cap "$cap" "$build/bench/replay/compare_bench" --benchmark_filter=BM_InterleavedRounds > "$log" 2>&1; then
    line=$(grep 'BM_InterleavedRounds' "$log" | tail -1)
    get() {
      local v
      v=$(grep -o "$1=[0-9.]*" <<< "$line" | cut -d= -f2)
      if [[ -n $v ]]; then printf '%.2f' "$v"; else printf '?'; fi
    }
    row "verify/read(2), $cap ($(grep -o 'block CRC [^,]*' "$log"))" \
      "shared $(get ratio_verify_wall)x wall ($(get ratio_verify_cpu)x CPU); unshared $(get ratio_verify_unshared_wall)x; one thread $(get ratio_verify_serial_wall)x"
    row "lockstep compare/read(2), $cap" "$(get ratio_compare_wall)x wall ($(get ratio_compare_cpu)x CPU)"
    row "pread / pread+CRC floor, $cap" "$(get ratio_pread_cpu)x / $(get ratio_pread_crc_cpu)x CPU"
  else
    failed=1
    row "verify and compare/read(2), $cap" "FAILED (see $log)"
  fi

  # 4. The model against torch.
  if [[ $have_torch == yes ]]; then
    log="$out/model-$cap.log"
    if with_cap "$cap" env DGRR_TORCH_PYTHON="$python" "$here/bench/model/compare_torch.sh" "$build" 5 1 > "$log" 2>&1; then
      row "model small vs torch, 1 thread, $cap" "$("$python" - "$log" <<'EOF'
import json, sys
for line in open(sys.argv[1]):
    if line.startswith("# summary"):
        r = json.loads(line.split(":", 1)[1])
        c = r["tokens_per_cpu_s"]
        print(f"{c['ratio_of_medians']}x tokens/CPU-s (dgrr {c['dgrr'][0]}, torch {c['torch'][0]})")
EOF
)"
    else
      failed=1
      row "model small vs torch, $cap" "FAILED (see $log)"
    fi
  else
    row "model small vs torch, $cap" "not run: $python has no torch"
  fi
done

{
  head -2 "$out/machine.txt"
  printf '%s\n' "${table[@]}"
} | tee "$out/table.txt"
exit $failed
