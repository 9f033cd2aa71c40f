#!/usr/bin/env bash
# On the lent GPU machine, in the repository root: unpacks .gpu/bundle.tar.xz
# (scripts/gpu-bundle.sh, made on the build machine) and runs
# scripts/gpu-checks.sh on it (docs/gpu.md section 5).
#   scripts/gpu-remote.sh OUTDIR
# OUTDIR gets gpu-checks.sh's table, kernel times and main logs (8 files in all, the
# device tool's limit), all-logs.tar.gz with
# the rest, and libraries.txt: which system libraries came from the bundle
# and where NVIDIA's were found.
set -uo pipefail
out=${1:?usage: scripts/gpu-remote.sh OUTDIR}
mkdir -p "$out"
SECONDS=0
if ! tar -xJf .gpu/bundle.tar.xz; then
  echo "gpu-remote: cannot unpack .gpu/bundle.tar.xz (made by scripts/gpu-bundle.sh?)" >&2
  exit 2
fi
# CTest's files (and a test's baked-in plugin folder) name the build folder
# by its path on the build machine: a link there where that path is free,
# else the files are rewritten.
origin=$(cat .gpu/origin)
here=$PWD/build
if [[ "$origin" != "$here" ]]; then
  if [[ ! -e "$origin" ]]; then
    mkdir -p "$(dirname "$origin")" && ln -s "$here" "$origin"
  else
    grep -rlF --include='*.cmake' "$origin" build | while read -r f; do sed -i "s#$origin#$here#g" "$f"; done
  fi
fi
{
  echo "bundle from $origin unpacked in ${SECONDS}s at $here"
  # The machine's own copy of a library wins; the bundle's fills the gaps.
  lib=$PWD/.gpu/lib
  for l in "$lib"/*; do
    n=$(basename "$l")
    if ldconfig -p | grep -qF "	$n ("; then rm -f "$l"; fi
  done
  echo "from the bundle: $(cd "$lib" && ls | tr '\n' ' ')"
  nv=""
  for n in libcudart.so.13 libcublas.so.13 libcublasLt.so.13 libnccl.so.2; do
    if ldconfig -p | grep -qF "	$n ("; then echo "$n: the machine's (ldconfig)"; continue; fi
    found=$(find /usr/local /opt /usr/lib -name "$n" 2>/dev/null | head -1)
    if [[ -n "$found" ]]; then nv+=":$(dirname "$found")"; echo "$n: $found"; else echo "$n: not found"; fi
  done
  export LD_LIBRARY_PATH="$lib$nv${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  echo "LD_LIBRARY_PATH=$LD_LIBRARY_PATH"
  echo "unresolved by dgrr and runtime_test:"
  ldd build/cli/dgrr build/tests/runtime/runtime_test | grep 'not found' || echo "  none"
} 2>&1 | tee "$out/libraries.txt"
# The export above ran in a pipeline's subshell: again here.
nv=$(grep -o '^LD_LIBRARY_PATH=.*' "$out/libraries.txt" | cut -d= -f2-)
export LD_LIBRARY_PATH="$nv"
export DGRR_CLI="$here/cli/dgrr" PATH="$here/cli:$PATH" PYTHONUNBUFFERED=1
# The device tool brings back at most 8 files: the logs that matter most
# as files, everything else (runs without checkpoints included) in one
# archive.
work=$(mktemp -d)
scripts/gpu-checks.sh build "$work"
rc=$?
for f in table.txt kernel-times.txt machine.txt gpu-tests.log device-fingerprint.txt python-cuda.log; do
  [[ -f "$work/$f" ]] && cp "$work/$f" "$out/"
done
tar -C "$work" --exclude='./runs/*/ckpt' -czf "$out/all-logs.tar.gz" .
rm -rf "$work"
echo "gpu-remote: gpu-checks.sh exit $rc after ${SECONDS}s"
exit "$rc"
