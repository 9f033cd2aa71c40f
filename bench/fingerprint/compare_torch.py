#!/usr/bin/python3
"""dgrr's fingerprint against torch.sum on the same 256 MiB float32 tensor.

Both run in this process on the very same memory: torch.sum on the tensor,
dgrr's FingerprintBytes (and each stripe consumer, and a plain read pass) on
its bytes through ctypes (libfingerprint_torch_helper.so, built by the
`fingerprint_torch_helper` target). Every round times every candidate once,
in a freshly shuffled order, so all of them see the same machine load; 256 MiB is
far above the L3, so every pass streams from memory.

Two clocks: the calling thread's CPU time (CLOCK_THREAD_CPUTIME_ID), the fair
one for single-threaded work on a machine shared with other processes (time
spent preempted is not counted; torch.sum with 1 thread runs in the calling
thread), and wall time, the only one that means anything for torch.sum on 2
threads. Reported per candidate and clock: the median and the best over the
rounds, GB/s of the median, and the median over rounds of the paired ratio
torch.sum time / candidate time (>= 1.0: the candidate is at least as fast).
"""
import argparse
import ctypes
import sys
import json
import os
import random
import statistics
import time

import torch


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--helper", required=True, help="path to libfingerprint_torch_helper.so")
    parser.add_argument("--mib", type=int, default=256, help="tensor size in MiB")
    parser.add_argument("--rounds", type=int, default=15)
    args = parser.parse_args()

    lib = ctypes.CDLL(os.path.abspath(args.helper))
    lib.dgrr_bench_fingerprint.argtypes = [ctypes.c_void_p, ctypes.c_size_t,
                                           ctypes.POINTER(ctypes.c_uint64)]
    lib.dgrr_bench_fingerprint_with.argtypes = [ctypes.c_void_p, ctypes.c_size_t,
                                                ctypes.c_char_p, ctypes.POINTER(ctypes.c_uint64)]
    lib.dgrr_bench_fingerprint_with.restype = ctypes.c_int
    lib.dgrr_bench_read_pass.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
    lib.dgrr_bench_read_pass.restype = ctypes.c_uint64
    lib.dgrr_bench_best_consumer.restype = ctypes.c_char_p
    lib.dgrr_bench_read_pass_isa.restype = ctypes.c_char_p
    lib.dgrr_bench_set_prefetch.argtypes = [ctypes.c_char_p]
    lib.dgrr_bench_set_prefetch.restype = ctypes.c_int
    lib.dgrr_bench_prefetch.restype = ctypes.c_char_p
    # DGRR_BENCH_PREFETCH picks the consumers' software prefetch (none, near,
    # near-paced, far; auto by default): fingerprint_simd.h, PrefetchPlan.
    prefetch = os.environ.get("DGRR_BENCH_PREFETCH", "auto")
    if not lib.dgrr_bench_set_prefetch(prefetch.encode()):
        sys.exit("compare_torch.py: DGRR_BENCH_PREFETCH=%s: not one of auto, none, near, near-paced, far" % prefetch)

    torch.manual_seed(0)
    x = torch.randn(args.mib * (1 << 20) // 4, dtype=torch.float32)
    ptr, n = x.data_ptr(), x.numel() * x.element_size()
    out = (ctypes.c_uint64 * 2)()

    def torch_sum(threads):
        def run():
            torch.set_num_threads(threads)
            return float(x.sum())
        return run

    def fingerprint():
        lib.dgrr_bench_fingerprint(ptr, n, out)
        return (out[0], out[1])

    def consumer(name):
        def run():
            lib.dgrr_bench_fingerprint_with(ptr, n, name.encode(), out)
            return (out[0], out[1])
        return run

    candidates = {
        "torch.sum 1 thread": torch_sum(1),
        "torch.sum 2 threads": torch_sum(2),
        "read pass": lambda: lib.dgrr_bench_read_pass(ptr, n),
        "FingerprintBytes": fingerprint,
    }
    for name in ("avx512", "avx2", "sse2"):
        if lib.dgrr_bench_fingerprint_with(ptr, n, name.encode(), out):
            candidates["single pass, %s consumer" % name] = consumer(name)

    # Every route must give the same fingerprint (and warms every page).
    values = {name: run() for name, run in candidates.items()}
    fps = {v for name, v in values.items() if not name.startswith(("torch", "read"))}
    if len(fps) != 1:
        raise SystemExit("compare_torch.py: the fingerprint routes disagree: %r" % values)

    names = list(candidates)
    wall = {name: [] for name in names}
    cpu = {name: [] for name in names}
    shuffler = random.Random(1)
    for _ in range(args.rounds):
        # A fresh order every round: no candidate always runs right after the
        # same one (in particular after the 2-thread sum, see below).
        order = list(names)
        shuffler.shuffle(order)
        for name in order:
            c0, t0 = time.thread_time(), time.perf_counter()
            candidates[name]()
            t1, c1 = time.perf_counter(), time.thread_time()
            wall[name].append(t1 - t0)
            cpu[name].append(c1 - c0)
            if name == "torch.sum 2 threads":
                # OpenMP's worker spins for a while after a parallel region;
                # let it go to sleep before the next candidate is timed.
                time.sleep(0.05)
    torch.set_num_threads(1)

    def paired(base, t):
        return round(statistics.median(b / c for b, c in zip(base, t)), 3)

    # First what ran and the ratios that answer the question, then the rows.
    isa = lib.dgrr_bench_best_consumer().decode()
    print("# instruction set: fingerprint consumer %s (prefetch %s), read pass %s; torch %s (CPU); %s MiB float32, "
          "%d rounds, load %s" % (isa, lib.dgrr_bench_prefetch().decode(), lib.dgrr_bench_read_pass_isa().decode(),
                                  torch.__version__,
                                  args.mib, args.rounds,
                                  " ".join(open("/proc/loadavg").read().split()[:3])))
    base = cpu["torch.sum 1 thread"]
    print("# vs torch.sum 1 thread, CPU time, median of paired ratios: FingerprintBytes %.3fx, "
          "read pass %.3fx" % (paired(base, cpu["FingerprintBytes"]), paired(base, cpu["read pass"])))

    for name in names:
        row = {"candidate": name}
        # The 2-thread sum's thread CPU time counts only the calling thread's share.
        if name != "torch.sum 2 threads":
            med = statistics.median(cpu[name])
            row.update({
                "cpu_median_ms": round(1e3 * med, 2),
                "cpu_best_ms": round(1e3 * min(cpu[name]), 2),
                "cpu_GBps": round(n / med / 1e9, 1),
                "cpu_vs_sum_1t": paired(cpu["torch.sum 1 thread"], cpu[name]),
            })
        med = statistics.median(wall[name])
        row.update({
            "wall_median_ms": round(1e3 * med, 2),
            "wall_best_ms": round(1e3 * min(wall[name]), 2),
            "wall_vs_sum_1t": paired(wall["torch.sum 1 thread"], wall[name]),
            "wall_vs_sum_2t": paired(wall["torch.sum 2 threads"], wall[name]),
        })
        print(json.dumps(row))


if __name__ == "__main__":
    main()
