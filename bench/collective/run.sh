#!/usr/bin/env bash
# Runs the collective benchmark for 1, 2 and 4 processes (oversubscribed on
# small machines; --allow-run-as-root for CI containers).
#   bench/collective/run.sh [BUILD_DIR]
set -euo pipefail
build=${1:-build}
bin="$build/bench/collective/collective_bench"
if [[ ! -x $bin ]]; then
  echo "bench: $bin is not built (needs MPI: cmake --build $build --target collective_bench)" >&2
  exit 1
fi
for ranks in 1 2 4; do
  mpirun --oversubscribe --allow-run-as-root -np "$ranks" "$bin" | { [[ $ranks == 1 ]] && cat || tail -n +2; }
done
