#!/usr/bin/env bash
# Seed corpora for the fuzz targets, from real run files.
#
#   fuzz/make-seeds.sh DGRR_BINARY OUT_DIR
#
# Trains two short runs of the tiny model (one plain, one smaller on two ranks
# with a bit flip), dumps a boundary of each with `replay --dump`, and copies their
# traces, checkpoints, dumps, config.json and env.json into OUT_DIR/<target>/,
# one folder per fuzz target, together with the small hand-made seeds in
# fuzz/seeds/. Idempotent: OUT_DIR is rebuilt from scratch. Nothing here is
# committed: the files are made fresh by the dgrr being fuzzed.
set -euo pipefail
dgrr=${1:?usage: make-seeds.sh DGRR_BINARY OUT_DIR}
out=${2:?usage: make-seeds.sh DGRR_BINARY OUT_DIR}
here=$(cd "$(dirname "$0")" && pwd)
dgrr=$(cd "$(dirname "$dgrr")" && pwd)/$(basename "$dgrr")

work=$(mktemp -d "${TMPDIR:-/tmp}/dgrr-seeds.XXXXXX")
trap 'rm -rf "$work"' EXIT
# Seeds are made by an instrumented dgrr; leaks there are not this script's business.
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=0}

flip=bitflip:step=1,rank=1,at=block0.mlp.fc.out,index=5,bit=20
# B is a smaller model than the tiny preset: its checkpoints are ~100 KB
# instead of ~1.4 MB, which the fuzzer hashes and parses many times faster.
small=(--layers 1 --dim 16 --heads 2 --seq 8 --batch 4)
"$dgrr" train --out "$work/a" --model tiny --steps 3 --ckpt-every 1 --quiet
"$dgrr" train --out "$work/b" --model tiny "${small[@]}" --steps 3 --ckpt-every 1 --ranks 2 --inject "$flip" --quiet
"$dgrr" replay "$work/a" --dump block0.mlp.fc.out@1:0 --dump-dir "$work/dumps-a" >/dev/null
"$dgrr" replay "$work/b" --dump block0.mlp.fc.out@1:1 --dump-dir "$work/dumps-b" >/dev/null || true  # exit 4/5 expected: the flip

rm -rf "$out"
mkdir -p "$out"/{fuzz_trace_reader,fuzz_checkpoint_header,fuzz_checkpoint_hdf5,fuzz_tensor_dump_header,fuzz_tensor_dump_hdf5,fuzz_config_json,fuzz_compare_json,fuzz_cli}

n=0
for run in a b; do
  for t in "$work/$run"/rank*.trace; do
    n=$((n + 1))
    cp "$t" "$out/fuzz_trace_reader/$run-$(basename "$t")"
    # Short prefixes too: the mutator works best on small inputs.
    head -c 1152 "$t" >"$out/fuzz_trace_reader/$run-$(basename "$t").head"
  done
  for c in "$work/$run"/ckpt/*.h5; do
    [ "$run" = b ] || continue
    cp "$c" "$out/fuzz_checkpoint_header/$run-$(basename "$c")"
    cp "$c" "$out/fuzz_checkpoint_hdf5/$run-$(basename "$c")"
  done
  for d in "$work/dumps-$run"/*.h5; do
    [ -e "$d" ] || continue
    cp "$d" "$out/fuzz_tensor_dump_header/$run-$(basename "$d")"
    cp "$d" "$out/fuzz_tensor_dump_hdf5/$run-$(basename "$d")"
  done
  cp "$work/$run/config.json" "$out/fuzz_config_json/$run-config.json"
done
# Pairs for the JSON diff: the two documents joined by a NUL byte.
join() { cat "$1"; printf '\0'; cat "$2"; }
join "$work/a/config.json" "$work/b/config.json" >"$out/fuzz_compare_json/configs"
join "$work/a/rank0.env.json" "$work/b/rank1.env.json" >"$out/fuzz_compare_json/envs"
cp "$work/a/rank0.env.json" "$out/fuzz_compare_json/env-alone"

for target in cli config_json compare_json; do
  cp "$here/seeds/$target"/* "$out/fuzz_$target/" 2>/dev/null || true
done
echo "make-seeds: $n traces and their checkpoints, dumps and JSON files in $out"
