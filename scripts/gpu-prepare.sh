#!/usr/bin/env bash
# Everything a session lent a GPU does before its first device call, in one
# command (docs/gpu.md section 5):
#   scripts/gpu-prepare.sh [BUILD]          BUILD: build (default)
# 1. builds BUILD (Release, with CUDA where nvcc is);
# 2. builds the Python binding for the device machine's CPython (3.12: the
#    interpreter DGRR_DEVICE_PYTHON names, else the first python3.12 on PATH)
#    in BUILD-py312, with a pybind11 that supports it (pip, into that folder);
#    without such an interpreter the bundle carries this machine's binding
#    only, and the device's Python tests then say they cannot load it;
# 3. packs .gpu/bundle.tar.xz (scripts/gpu-bundle.sh).
# Then: the device tool's run(carry=[".gpu"], command='scripts/gpu-remote.sh "$OUT"').
set -euo pipefail
root=$(git rev-parse --show-toplevel)
cd "$root"
build=${1:-build}
gen=()
command -v ninja > /dev/null && gen=(-G Ninja)
launcher=()
command -v ccache > /dev/null && launcher=(-DCMAKE_C_COMPILER_LAUNCHER=ccache -DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
if [[ ! -f "$build/CMakeCache.txt" ]]; then
  cmake -S . -B "$build" "${gen[@]}" -DCMAKE_BUILD_TYPE=Release "${launcher[@]}"
fi
echo "gpu-prepare: building $build"
cmake --build "$build" -j "$(nproc)"
grep -q '^CMAKE_CUDA_COMPILER:.*nvcc' "$build/CMakeCache.txt" ||
  echo "gpu-prepare: warning: $build has no CUDA compiler: the device tests will skip there" >&2
extra=()
is312() { [[ -n "$1" ]] && "$1" -c 'import sys; sys.exit(0 if sys.version_info[:2] == (3, 12) else 1)' 2> /dev/null; }
py=${DGRR_DEVICE_PYTHON:-}
if [[ -z "$py" ]]; then
  # python3.12 on PATH, else one that pyenv installed (its shim runs only the
  # versions pyenv has selected).
  for candidate in "$(command -v python3.12 || true)" \
                   "$(command -v pyenv > /dev/null && ls -d "$(pyenv root)"/versions/3.12*/bin/python3.12 2> /dev/null | tail -1)"; do
    if is312 "$candidate"; then py=$candidate; break; fi
  done
fi
if is312 "$py"; then
  pybuild="$build-py312"
  if [[ ! -f "$pybuild/CMakeCache.txt" ]]; then
    # Debian's pybind11 (2.10) predates CPython 3.12's support.
    "$py" -m pip install -q --disable-pip-version-check --target "$pybuild/pybind11-site" 'pybind11>=2.12'
    cmake -S . -B "$pybuild" "${gen[@]}" -DCMAKE_BUILD_TYPE=Release "${launcher[@]}" \
      -DDGRR_PYTHON_EXECUTABLE="$py" -DDGRR_TORCH_ACCESS=OFF \
      -Dpybind11_DIR="$pybuild/pybind11-site/pybind11/share/cmake/pybind11"
  fi
  echo "gpu-prepare: building the binding for $py in $pybuild"
  cmake --build "$pybuild" -j "$(nproc)" --target dgrr_python dgrr_python_files
  extra=("$pybuild")
else
  echo "gpu-prepare: no CPython 3.12 here (set DGRR_DEVICE_PYTHON): the bundle carries this machine's binding only" >&2
fi
scripts/gpu-bundle.sh "$build" "${extra[@]}"
