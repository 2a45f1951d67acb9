"""Two ranks, one stage each, on the tuple model (``tuple_model.py``): each schedule's losses
and this rank's weights against the same schedule with both stages in one process (the
in-process path, checked against one stage in ``test_pipeline_tuple_messages.py``).
Usage: ``torchrun --standalone --nproc-per-node=2 tests/tuple_worker.py OUTDIR``."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import torch
import torch.distributed as dist
import tuple_model as tm

from asyncpp.optim import build_optimizer
from asyncpp.pipeline import PipelineExecutor, PipelineTopology, build_stages, init_distributed

HP = dict(lr=0.02, momentum=0.9, ns_dtype="float64", adamw_lr=0.01)


def run(schedule, stages, placement=None, topo=None):
    opts = {s: build_optimizer("muon", mod.named_parameters(), **HP)
            for s, mod in stages.items()}
    if topo is not None:
        (s, mod), = stages.items()
        ex = PipelineExecutor(mod, opts[s], schedule=schedule, num_microbatches=2,
                              topology=topo, loss_fn=tm.loss)
    else:
        ex = PipelineExecutor(stages, opts, schedule=schedule, num_microbatches=2,
                              loss_fn=tm.loss, placement=placement)
    losses = ex.train_steps(tm.batches(4))
    return losses, {n: p.detach().clone() for mod in stages.values()
                    for n, p in mod.named_parameters()}


def main(out: Path) -> None:
    init_distributed("cpu")
    torch.set_num_threads(1)
    topo = PipelineTopology.create(2)
    rank = dist.get_rank()
    result = {}
    for schedule, as_dict in (("1f1b", False), ("2bw", False), ("zb-h1", False),
                              ("2bw", True)):
        ref_l, ref_w = run(schedule, dict(enumerate(build_stages(tm.layers(2), 2))), [[0, 1]])
        mine = build_stages(tm.layers(2, as_dict=as_dict), 2, stages=[topo.stage])[0]
        before = {n: p.detach().clone() for n, p in mine.named_parameters()}
        got_l, got_w = run(schedule, {topo.stage: mine}, topo=topo)
        loss_dev = max(abs(a - b) for a, b in zip(got_l, ref_l)) if topo.is_last else 0.0
        result[schedule + ("-dict" if as_dict else "")] = {
            "loss": loss_dev,
            "weights": max(float((got_w[n] - ref_w[n]).abs().max()) for n in got_w),
            "moved": any(not torch.equal(before[n], got_w[n]) for n in got_w)}
    (out / f"rank{rank}.json").write_text(json.dumps(result))
    dist.destroy_process_group()


if __name__ == "__main__":
    main(Path(sys.argv[1]))
