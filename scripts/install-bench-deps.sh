#!/bin/sh
# Packages only the PyTorch comparison (bench/model/compare_torch.sh) needs;
# large, so kept out of install-deps.sh. Debian's torch links libblas.so.3:
# installing OpenBLAS makes update-alternatives point that at OpenBLAS (its
# priority is higher than the reference BLAS's), which is what a user gets.
set -eu
apt-get update
DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
  python3-torch libopenblas0-pthread
update-alternatives --display libblas.so.3-x86_64-linux-gnu | head -3
