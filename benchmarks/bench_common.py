"""Shared helpers for the ratio benchmarks: interleaved repeats, medians, a table printer.

Every benchmark times a candidate and its baseline *in the same process, interleaved*, so that
load on a shared machine hits both alike; the figure of merit is the ratio of medians.
"""

from __future__ import annotations

import json
import os
import platform
import statistics
import time
from collections.abc import Callable
from datetime import datetime, timezone

import torch


def timeit(fn: Callable[[], object], sync: Callable[[], None] | None = None) -> float:
    """Wall time of one call of ``fn`` (after ``sync`` for asynchronous devices)."""
    if sync:
        sync()
    t0 = time.perf_counter()
    fn()
    if sync:
        sync()
    return time.perf_counter() - t0


def interleaved(cases: dict[str, Callable[[], object]], repeats: int, warmup: int = 1,
                sync=None) -> dict[str, list[float]]:
    """Run every case ``warmup`` times, then ``repeats`` rounds of one call each, interleaved."""
    for fn in cases.values():
        for _ in range(warmup):
            fn()
    times: dict[str, list[float]] = {k: [] for k in cases}
    for _ in range(repeats):
        for k, fn in cases.items():
            times[k].append(timeit(fn, sync))
    return times


def summary(ts: list[float]) -> dict[str, float]:
    return {"median": statistics.median(ts), "min": min(ts), "max": max(ts), "n": len(ts)}


def print_table(title: str, rows: list[tuple[str, dict]], baseline: str | None = None,
                unit: str = "s") -> None:
    print(f"\n## {title}")
    base = dict(rows).get(baseline) if baseline else None
    print(f"| case | median {unit} | min–max {unit} | ratio vs {baseline or '-'} |")
    print("| --- | --- | --- | --- |")
    for name, s in rows:
        ratio = f"{base['median'] / s['median']:.3f}" if base else "-"
        print(f"| {name} | {s['median']:.4g} | {s['min']:.4g}–{s['max']:.4g} | {ratio} |")


def machine() -> dict[str, str]:
    return {
        "date": datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "threads": str(torch.get_num_threads()),
        "cpu": platform.processor() or platform.machine(),
        "cuda": torch.cuda.get_device_name() if torch.cuda.is_available() else "none",
    }


def save(name: str, payload: dict) -> str:
    """Write ``benchmarks/results/<name>.json`` atomically and return its path (the folder is
    ``$ASYNCPP_BENCH_RESULTS`` when set, e.g. by the smoke tests)."""
    out = os.environ.get("ASYNCPP_BENCH_RESULTS") or os.path.join(os.path.dirname(__file__),
                                                                   "results")
    os.makedirs(out, exist_ok=True)
    path = os.path.join(out, f"{name}.json")
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump({"machine": machine(), **payload}, f, indent=2)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    return path


def write_readme_block(name: str, text: str, readme: str | None = None) -> str:
    """Replace the block between ``<!-- name:begin -->`` and ``<!-- name:end -->`` in
    ``benchmarks/README.md`` (appended when absent) by ``text``; returns the README's path.
    Skipped (returns "") when results go elsewhere (``$ASYNCPP_BENCH_RESULTS``, the smoke
    tests): a README shows only the recorded results."""
    if readme is None:
        if os.environ.get("ASYNCPP_BENCH_RESULTS"):
            return ""
        readme = os.path.join(os.path.dirname(__file__), "README.md")
    begin, end = f"<!-- {name}:begin -->", f"<!-- {name}:end -->"
    with open(readme) as f:
        doc = f.read()
    block = f"{begin}\n{text.rstrip()}\n{end}"
    if begin in doc:
        i, j = doc.index(begin), doc.index(end) + len(end)
        doc = doc[:i] + block + doc[j:]
    else:
        doc = doc.rstrip() + "\n\n" + block + "\n"
    with open(readme, "w") as f:
        f.write(doc)
    return readme
