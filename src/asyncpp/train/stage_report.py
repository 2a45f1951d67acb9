r"""Per-rank memory and per-stage time of a run, for ``summary.json`` and the closing lines.

Each rank reports one entry (:func:`rank_entry`): its peak memory (CUDA: the peak allocated by
PyTorch on its device; CPU: the process's peak resident set size) and, per stage it runs, the
steady-state window of :mod:`asyncpp.pipeline.runtime.stage_clock` — busy, communication and
idle seconds with :math:`\text{busy} + \text{comm} + \text{idle} = \text{wall}`. Under
``torchrun`` the entries are gathered to every rank at the end of the run; one process has one
entry whose stage is ``None`` (the whole model: no communication, idle is the trainer's own
time between steps).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from ..pipeline.runtime.stage_clock import StageTimes
from .components import peak_memory_mb


def rank_entry(rank: int, dp_rank: int, stages: Sequence[int], device: torch.device,
               times: Sequence[StageTimes]) -> dict:
    """What rank ``rank`` contributes: memory and the time of each of its stages."""
    return {"rank": rank, "dp_rank": dp_rank, "stages": list(stages), "device": str(device),
            "peak_mem_mb": peak_memory_mb(device), "times": [t.to_dict() for t in times]}


def summary_sections(entries: Sequence[dict]) -> dict:
    """``summary.json``'s ``stage_times`` (one entry per stage and rank, by stage then rank),
    ``ranks`` (memory of every rank) and ``peak_mem_mb`` (the largest of them)."""
    stages = [{"rank": e["rank"], "dp_rank": e["dp_rank"], **t}
              for e in entries for t in e["times"]]
    stages.sort(key=lambda d: (-1 if d["stage"] is None else d["stage"], d["rank"]))
    ranks = sorted(({k: e[k] for k in ("rank", "dp_rank", "stages", "device", "peak_mem_mb")}
                    for e in entries), key=lambda d: d["rank"])
    return {"stage_times": [{"stage": d.pop("stage"), **d} for d in stages], "ranks": ranks,
            "peak_mem_mb": max(r["peak_mem_mb"] for r in ranks) if ranks else None}


def stage_lines(sections: dict, last_step: int) -> list[str]:
    """One closing line per stage entry: shares of the wall time, the steps measured (ending
    at ``last_step``), and the rank's peak memory."""
    mem = {r["rank"]: r["peak_mem_mb"] for r in sections["ranks"]}
    lines = []
    for d in sections["stage_times"]:
        who = ("one process (all stages)" if d["stage"] is None
               else f"stage {d['stage']} (rank {d['rank']})")
        if d["wall_s"] <= 0:
            lines.append(f"{who}: no steps timed; peak memory {mem[d['rank']]:,.0f} MB")
            continue
        first = last_step - d["steps"] + 1
        span = f"step {first}" if d["steps"] == 1 else f"steps {first}-{last_step}"
        comm = "" if d["stage"] is None else f", comm {100 * d['comm_share']:.1f} %"
        wait = "" if d["stage"] is None else \
            f" (waiting for a peer {100 * d['wait_share']:.1f} %)"
        lines.append(f"{who}: busy {100 * d['busy_share']:.1f} %{comm}, idle "
                     f"{100 * d['idle_share']:.1f} %{wait} of {d['wall_s']:.2f} s over {span}; "
                     f"peak memory {mem[d['rank']]:,.0f} MB")
    return lines
