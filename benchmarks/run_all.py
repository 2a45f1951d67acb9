"""Run the CPU ratio benchmarks 1–5 in one go (``make bench``) and print every table.

Each benchmark also writes ``benchmarks/results/<name>.json``; the GPU run is separate
(``benchmarks/gpu/run_gpu.py``). Extra arguments are not forwarded: run a script on its own to
change its sizes (``python benchmarks/bench_pipeline.py --help``).
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import bench_delay
import bench_memory
import bench_muon
import bench_pipeline
import bench_train
import bench_wpipe
import peer_torch

BENCHMARKS = [("1 Muon step", bench_muon), ("2 delay-core overhead", bench_delay),
              ("3 pipeline throughput", bench_pipeline), ("4 weight-version memory", bench_memory),
              ("5 training throughput", bench_train), ("7 WPipe vs 2BW vs 1F1B", bench_wpipe),
              ("8 asyncpp vs torch.distributed.pipelining", peer_torch)]


def main(argv=None) -> int:
    up = subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()
    print(f"# asyncpp ratio benchmarks\nmachine load at start: {up}", flush=True)
    failed = []
    t_all = time.perf_counter()
    for title, mod in BENCHMARKS:
        print(f"\n# {title} ({Path(mod.__file__).name})", flush=True)
        t0 = time.perf_counter()
        try:
            mod.main([])
        except Exception as e:  # noqa: BLE001 - report and go on to the next benchmark
            failed.append(title)
            print(f"FAILED: {type(e).__name__}: {e}")
        print(f"({time.perf_counter() - t0:.0f} s)", flush=True)
    up = subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()
    print(f"\nall done in {time.perf_counter() - t_all:.0f} s; load at end: {up}")
    if failed:
        print("failed:", ", ".join(failed))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
