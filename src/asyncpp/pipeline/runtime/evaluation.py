"""Forward-only evaluation on a held weight version: each stage of the rank runs its part of
every microbatch in stage order (one global sequence), activations travel as in training."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import torch

from ..actions import ACTIVATION, Recv, Send
from .steps import split_batch


@torch.no_grad()
def evaluate(ex, batches: Iterable, version: int | None = None) -> list[float]:
    """Forward-only losses of ``batches`` (same format as :meth:`train_steps`) on one
    weight version (default: the newest, i.e. the stages' parameters), averaged over
    microbatches and data-parallel replicas; returned on every rank. Batches may differ in
    size (each batch's first activation carries its shape). With several stages per rank,
    ``version`` is the label for each stage (every stage must hold it), or a mapping
    {stage: label} (WPipe's two groups read different versions at one step)."""
    batches = list(batches)
    weights = {}
    for s, ctx in ex.contexts.items():
        v = ctx.newest if version is None else \
            version[s] if isinstance(version, Mapping) else version
        if v not in ctx.versions:
            raise ValueError(f"version {v} of stage {s} is not held; live: "
                             f"{sorted(ctx.versions)}")
        weights[s] = ctx.versions[v]
    P, m = ex.num_stages, ex.num_microbatches
    contexts, tr = ex.contexts, ex.transport
    for ctx in contexts.values():
        ctx.begin_call()
    tr.begin_call()
    last = P - 1 in contexts
    losses = torch.zeros(len(batches), dtype=torch.float64, device=ex.device)
    for k, b in enumerate(batches):
        # batches may differ in size (a validation set's last batch): a header each
        tr.header_sent.clear()
        tr.header_recvd.clear()
        xs = split_batch(b[0], m, ex.device, "inputs") if 0 in contexts else None
        ys = split_batch(b[1], m, ex.device, "targets") if last else None
        for i in range(m):
            for s, ctx in sorted(contexts.items()):  # stage order: one global sequence
                if s == 0:
                    x = xs[i]
                else:
                    tr.communicate([Recv(ACTIVATION, k, i, s - 1, stage=s)], contexts)
                    x = ctx.in_msgs.pop((ACTIVATION, k, i))
                if ctx.is_last:
                    loss = ctx.output(weights[s], x, ys[i])
                    losses[k] += loss.double().reshape(()) / m
                else:
                    # a tensor or a tuple of tensors; the transport packs a tuple
                    ctx.out_msgs[(ACTIVATION, k, i)] = ctx.output(weights[s], x)
                    tr.communicate([Send(ACTIVATION, k, i, s + 1, stage=s)], contexts)
    tr.drain_sends()
    return ex._gather_losses(losses, last)
