#!/usr/bin/env bash
# Installs everything dgrr needs to build and test: Debian packages, then a
# Python virtual environment with PyTorch from PyPI (below). Idempotent:
# packages already present are not reinstalled, apt is not touched at all when
# nothing is missing, and the environment is left alone when it already holds
# what scripts/python-requirements.txt pins. Must run as root (or via sudo).
set -euo pipefail

packages=(
  build-essential g++ cmake make ninja-build pkg-config git
  libhdf5-dev hdf5-tools
  libzstd-dev libxxhash-dev
  libboost-program-options-dev
  libgtest-dev libgmock-dev libbenchmark-dev
  nlohmann-json3-dev
  python3
  # tests read checkpoints with h5py through dgrr's zstd HDF5 plugin; they run
  # /usr/bin/python3, which is Debian's python and sees this package.
  python3-h5py
  # The Python package (python/, docs/python.md) is built with pybind11 for
  # Debian's /usr/bin/python3 and tested with pytest; its torch tests train
  # with Debian's CPU torch (large, but the binding's tests need it).
  python3-dev pybind11-dev python3-pytest python3-numpy python3-torch
  # torch's C++ headers (python3-torch ships only links to them): the
  # binding's dgrr._torch_access reads tensors from their C++ objects
  libtorch-dev
  # make fuzz / fuzz-smoke: clang-14 and its libFuzzer + ASan/UBSan runtimes
  # (libclang_rt.fuzzer*.a and the sanitizer headers are in libclang-rt-14-dev,
  # only a Recommends of clang, so named here). make tsan uses gcc's libtsan2,
  # which g++ already pulls in.
  clang libclang-rt-14-dev
  # ranks as processes (issue 12, docs/communicator.md): Open MPI, its mpirun
  # and headers. Tests run it as root with --allow-run-as-root.
  libopenmpi-dev openmpi-bin
  # tests/cli/report_test.cc opens dgrr report's HTML page in headless Chromium
  chromium
)

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if ((${#missing[@]})); then
echo "install-deps: installing ${missing[*]}" >&2
if [ "$(id -u)" -ne 0 ]; then
  if command -v sudo >/dev/null 2>&1; then SUDO=sudo; else
    echo "install-deps: need root to install: ${missing[*]}" >&2; exit 2
  fi
else
  SUDO=
fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y --no-install-recommends "${missing[@]}"
fi

# The Python environment: Debian's interpreter, torch from PyPI. At a fixed
# place outside the checkout, so a fresh clone (CI's) reuses it and a machine
# downloads torch once; a stamp records the requirements it was made from.
venv=${DGRR_VENV:-/opt/dgrr/venv-torch}
requirements=$(dirname "$0")/python-requirements.txt
want=$(sha256sum < "$requirements" | cut -d' ' -f1)
if [[ -f "$venv/.dgrr-requirements" && "$(cat "$venv/.dgrr-requirements")" == "$want" ]] &&
   "$venv/bin/python" -c 'import torch, torchdata' 2>/dev/null; then
  exit 0
fi
echo "install-deps: creating the Python environment $venv with torch 2.11.0 from PyPI" >&2
echo "install-deps: PyPI's torch is a CUDA build: ~3 GB to download, ~4.6 GB on disk (once per machine)" >&2
if [ "$(id -u)" -ne 0 ] && ! mkdir -p "$venv" 2>/dev/null; then
  echo "install-deps: cannot create $venv: run as root or set DGRR_VENV to a writable place" >&2; exit 2
fi
mkdir -p "$(dirname "$venv")"
/usr/bin/python3 -m venv --system-site-packages "$venv"
# pip prints one line per file it downloads (with its size) and per step.
"$venv/bin/python" -m pip install --disable-pip-version-check --progress-bar off \
  -r "$requirements" 2>&1 | sed -u 's/^/install-deps: pip: /' >&2
"$venv/bin/python" -c 'import torch, torchdata; print("install-deps: torch", torch.__version__, "ready in '"$venv"'")' >&2
echo "$want" > "$venv/.dgrr-requirements"
