#!/usr/bin/env python3
"""Sums dgrr's per-kernel time files (DGRR_KERNEL_TIMES) into one table.

    scripts/kernel-times.py [--steps N] [--top K] PATH...

Each PATH is a kernel-times-*.json file or a directory of them (every
launcher of a run writes one: the batch's and the optimizer's, per rank).
The format, `dgrr.kernel_times/1`, is in docs/gpu.md ("Where a device step's
time goes"). Rows of the same name are added across files; with --steps N
each row also shows its milliseconds per step. The last lines say how much
of the longest-lived launcher's lifetime the timed work covers: for one rank
on a GPU, the rest is the device idle or busy with what no launcher timed
(set-up, host work, gaps between launches, recording's own kernels).

Exit status: 0 printed; 1 usage; 2 a path cannot be read; 3 a file is not
`dgrr.kernel_times/1` (the file and the reason are named).
"""
import argparse
import json
import os
import sys

SCHEMA = "dgrr.kernel_times/1"


class Invalid(Exception):
    pass


class Parser(argparse.ArgumentParser):
    def error(self, message):  # usage errors exit 1, as dgrr's do
        self.print_usage(sys.stderr)
        print(f"{self.prog}: {message}", file=sys.stderr)
        sys.exit(1)


def load(path):
    try:
        with open(path, "rb") as f:
            data = f.read(16 << 20)
    except OSError as e:
        print(f"kernel-times: {path}: cannot read: {e.strerror}", file=sys.stderr)
        sys.exit(2)
    try:
        doc = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as e:
        raise Invalid(f"{path}: not JSON: {e}")
    if not isinstance(doc, dict):
        raise Invalid(f"{path}: not a JSON object")
    if doc.get("schema") != SCHEMA:
        raise Invalid(f"{path}: schema {doc.get('schema')!r}, this script reads {SCHEMA!r}")
    for key, kind in (("device", str), ("clock", str), ("lifetime_s", (int, float)),
                      ("timed_s", (int, float)), ("rows", list)):
        if not isinstance(doc.get(key), kind) or isinstance(doc.get(key), bool):
            raise Invalid(f"{path}: field {key!r} missing or of the wrong type")
    for i, row in enumerate(doc["rows"]):
        if not isinstance(row, dict):
            raise Invalid(f"{path}: rows[{i}] is not an object")
        for key, kind in (("name", str), ("calls", int), ("bytes", int), ("seconds", (int, float))):
            value = row.get(key)
            if not isinstance(value, kind) or isinstance(value, bool) or (kind is not str and value < 0):
                raise Invalid(f"{path}: rows[{i}].{key} missing, negative or of the wrong type")
    return doc


def files_of(paths):
    out = []
    for p in paths:
        if os.path.isdir(p):
            names = sorted(n for n in os.listdir(p) if n.startswith("kernel-times-") and n.endswith(".json"))
            out.extend(os.path.join(p, n) for n in names)
        else:
            out.append(p)
    return out


def main(argv):
    ap = Parser(prog="kernel-times.py", description=__doc__.split("\n\n")[0])
    ap.add_argument("--steps", type=int, default=0, help="steps the run trained (adds ms/step)")
    ap.add_argument("--top", type=int, default=0, help="print only the K longest rows")
    ap.add_argument("paths", nargs="+", help="kernel-times-*.json files or directories of them")
    args = ap.parse_args(argv)
    if args.steps < 0 or args.top < 0:
        ap.error("--steps and --top take numbers >= 0")
    files = files_of(args.paths)
    if not files:
        print(f"kernel-times: no kernel-times-*.json in {' '.join(args.paths)}", file=sys.stderr)
        return 2
    try:
        docs = [load(f) for f in files]
    except Invalid as e:
        print(f"kernel-times: {e}", file=sys.stderr)
        return 3
    rows = {}
    for doc in docs:
        for r in doc["rows"]:
            acc = rows.setdefault(r["name"], [0, 0, 0.0])
            acc[0] += r["calls"]
            acc[1] += r["bytes"]
            acc[2] += r["seconds"]
    timed = sum(v[2] for v in rows.values())
    lifetime = max(d["lifetime_s"] for d in docs)
    devices = sorted({f"{d['device']} ({d['clock']})" for d in docs})
    print(f"# {len(docs)} launcher file(s), {', '.join(devices)}")
    per_step = args.steps > 0
    head = f"{'kernel or copy':34} {'calls':>8} {'ms':>10} {'share':>7}"
    if per_step:
        head += f" {'ms/step':>9} {'calls/step':>10}"
    print(head + f" {'MB':>9}")
    order = sorted(rows.items(), key=lambda kv: (-kv[1][2], kv[0]))
    if args.top:
        order = order[:args.top]
    for name, (calls, nbytes, seconds) in order:
        line = f"{name:34} {calls:8d} {seconds * 1e3:10.3f} {100 * seconds / timed if timed else 0:6.1f}%"
        if per_step:
            line += f" {seconds * 1e3 / args.steps:9.3f} {calls / args.steps:10.1f}"
        print(line + f" {nbytes / 1e6:9.2f}")
    print(f"# timed {timed * 1e3:.3f} ms; the longest-lived launcher lived {lifetime * 1e3:.3f} ms"
          f" ({100 * timed / lifetime if lifetime else 0:.1f}% timed): with one rank on a GPU, the rest is"
          " the device idle or busy with what no launcher timed (set-up, host work, launch gaps, recording)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
