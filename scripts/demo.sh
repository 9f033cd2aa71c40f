#!/usr/bin/env bash
# `make run`: the end-to-end demo. Grows with the project; for now it shows the
# CLI. Replaced as the trace writer and training workload land.
set -euo pipefail
build=${1:-build}
"$build/cli/dgrr" --version
"$build/cli/dgrr" --help
