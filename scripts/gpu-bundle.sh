#!/usr/bin/env bash
# Packs a build for the lent GPU machine (docs/gpu.md section 5).
#   scripts/gpu-bundle.sh BUILD [PY_BUILD...]
# The device tool carries at most 64 MiB with a call, and a build folder is
# about 300 MB (objects, static libraries, unstripped programs). This writes
# .gpu/bundle.tar.xz (about 15 MB): the build tree without objects, static
# libraries or CMake's own files, its programs and shared objects stripped,
# plus the shared libraries they load from this machine's system (HDF5, zstd,
# xxhash, Open MPI, Boost, ...), which that machine's image may lack. The
# NVIDIA libraries are not packed: the driver's image has cuBLAS and NCCL,
# and scripts/gpu-remote.sh finds them there. Each PY_BUILD is another build
# folder whose Python extensions (dgrr._dgrr for another CPython, say 3.12,
# the device's interpreter) join build/python/dgrr.
# .gpu/ is listed in .git/info/exclude, so the call carries it only when
# named: run(carry=[".gpu"], command="scripts/gpu-remote.sh \"$OUT\"").
set -euo pipefail
build=$(realpath "${1:?usage: scripts/gpu-bundle.sh BUILD [PY_BUILD...]}")
shift
root=$(git rev-parse --show-toplevel)
grep -qx '/.gpu/' "$root/.git/info/exclude" 2>/dev/null || echo '/.gpu/' >> "$root/.git/info/exclude"
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
mkdir -p "$stage/build" "$stage/.gpu/lib"
(cd "$build" && find . -path ./CMakeFiles -prune -o -path ./Testing -prune -o -type f \
   ! -name '*.o' ! -name '*.a' ! -name '*.ninja' ! -name '.ninja_*' ! -name '*.gch' ! -name '*.pch' -print0 |
   tar --null -T - -cf -) | tar -C "$stage/build" -xf -
for py in "$@"; do
  cp "$(realpath "$py")"/python/dgrr/*.so "$stage/build/python/dgrr/"
done
# Programs and shared objects: stripped (debug sections are most of them).
elves=()
while IFS= read -r -d '' f; do
  if head -c 4 "$f" | grep -q 'ELF'; then elves+=("$f"); fi
done < <(find "$stage/build" -type f -print0)
strip --strip-debug "${elves[@]}"
# The system libraries they load, except glibc's, the C++ runtime (the
# device's is newer, and torch there needs it) and NVIDIA's.
for f in "${elves[@]}"; do ldd "$f" 2>/dev/null | awk '/=> \//{print $3}'; done | sort -u |
  grep -Ev '/(libc|libm|libdl|libpthread|librt|libutil|libresolv|ld-linux-x86-64|libstdc\+\+|libgcc_s)\.so' |
  grep -Ev 'cuda|nvidia|nccl|cublas|torch|libc10|libgomp|libshm' |
  while read -r lib; do cp -L "$lib" "$stage/.gpu/lib/"; done
echo "$build" > "$stage/.gpu/origin"
mkdir -p "$root/.gpu"
tar -C "$stage" -cJf "$root/.gpu/bundle.tar.xz" build .gpu
echo "gpu-bundle: $root/.gpu/bundle.tar.xz, $(du -h "$root/.gpu/bundle.tar.xz" | cut -f1) ($(ls "$stage/.gpu/lib" | wc -l) system libraries, ${#elves[@]} programs and shared objects)"
