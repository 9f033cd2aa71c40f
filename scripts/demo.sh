#!/usr/bin/env bash
# `make run`: the end-to-end demo on the embedded default corpus.
#   1. train the small model (2 data-parallel ranks), recording every boundary;
#   2. train it again with one bit flipped in one tensor on rank 1;
#   3. dgrr compare names the first operator, step and rank where they differ;
#   4. the same fault in a run recorded cheaply (sdc): dgrr bisect finds the
#      step from the per-step fingerprints and names the operator by replaying
#      only the steps since the last checkpoint.
# DGRR_DEMO_STEPS and DGRR_DEMO_DIR override the length and the output folder.
set -euo pipefail
build=${1:-build}
dgrr="$build/cli/dgrr"
out=${DGRR_DEMO_DIR:-runs/demo}
steps=${DGRR_DEMO_STEPS:-120}
fault_step=$((steps * 2 / 3))
common=(--model small --steps "$steps" --ranks 2 --threads 1 --ckpt-every 40 --force)

banner() { printf '\n== %s\n' "$*"; }

banner "dgrr $("$dgrr" --version | cut -d' ' -f2-)"
banner "1/5 training the small model for $steps steps: $out/clean"
"$dgrr" train --out "$out/clean" "${common[@]}"

banner "2/5 the same run with one bit flipped at step $fault_step on rank 1: $out/faulty"
"$dgrr" train --out "$out/faulty" "${common[@]}" \
  --inject "bitflip:step=$fault_step,rank=1,at=block2.mlp.gelu.out"

banner "3/5 both traces are intact"
"$dgrr" verify "$out"/clean/rank*.trace "$out"/faulty/rank*.trace

banner "4/5 where do the two runs first differ?"
rc=0
"$dgrr" compare "$out/clean" "$out/faulty" --context 2 --perfetto "$out/compare.perfetto.json" || rc=$?
if [ "$rc" -ne 4 ]; then
  echo "demo: expected compare to find the divergence (exit 4), got $rc" >&2
  exit 1
fi
banner "5/5 the same fault recorded cheaply (mode sdc: step ends and collectives only): $out/faulty-sdc"
"$dgrr" train --out "$out/faulty-sdc" "${common[@]}" --mode sdc \
  --inject "bitflip:step=$fault_step,rank=1,at=block2.mlp.gelu.out"
rc=0
"$dgrr" bisect --good "$out/clean" --bad "$out/faulty-sdc" --context 1 || rc=$?
if [ "$rc" -ne 4 ]; then
  echo "demo: expected bisect to name the divergence (exit 4), got $rc" >&2
  exit 1
fi
banner "done: open $out/compare.perfetto.json in ui.perfetto.dev to see the aligned runs"
