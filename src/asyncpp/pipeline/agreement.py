"""All ranks agree on an error: a collective after which every rank knows whether any rank
failed, and which one first, so a mistake on one rank stops every rank with the same message
instead of leaving the others waiting for it."""

from __future__ import annotations

import torch.distributed as dist


def first_error(error: str | None, group=None) -> tuple[int, str] | None:
    """Collective over ``group`` (default: the world): gather every rank's ``error`` (None
    when it has none); the (global rank, message) of the lowest rank that reported one, or
    None when none did. Same answer on every rank."""
    everyone: list = [None] * dist.get_world_size(group)
    dist.all_gather_object(everyone, error, group=group)
    bad = [(r, e) for r, e in enumerate(everyone) if e]
    if not bad:
        return None
    r, e = bad[0]
    ranks = dist.get_process_group_ranks(group) if group is not None else range(len(everyone))
    return list(ranks)[r], e
