"""One comparison of a configuration across ranks: every rank's settings are gathered, and a
difference raises the same ``ValueError`` on every rank, naming each dotted key that differs
and its value on rank 0 and on the first rank that differs."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping

import torch.distributed as dist


def digest(obj) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True, default=repr).encode()).hexdigest()


def flatten(d: Mapping, prefix: str = "") -> dict:
    """{"a": {"b": 1}} -> {"a.b": 1}: every leaf under its dotted key."""
    out = {}
    for k, v in d.items():
        key = f"{prefix}{k}"
        if isinstance(v, Mapping) and v:
            out.update(flatten(v, key + "."))
        else:
            out[key] = v
    return out


def compare_across_ranks(mine: dict, group) -> None:
    """All-gather ``mine`` and raise ``ValueError`` on every rank if any rank differs."""
    world = dist.get_world_size(group)
    everyone = [None] * world
    dist.all_gather_object(everyone, (digest(mine), mine), group=group)
    ref_digest, ref = everyone[0]
    bad = [r for r, (d, _) in enumerate(everyone) if d != ref_digest]
    if bad:
        # nested settings (a trainer's whole configuration) are compared leaf by leaf, so the
        # message names the dotted keys that differ, never whole sub-dictionaries
        ref, other = flatten(ref), flatten(everyone[bad[0]][1])
        missing = "(not set)"
        keys = sorted(k for k in set(ref) | set(other)
                      if ref.get(k, missing) != other.get(k, missing))
        diffs = "; ".join(f"{k}: rank 0 has {ref.get(k, missing)!r}, rank {bad[0]} has "
                          f"{other.get(k, missing)!r}" for k in keys)
        raise ValueError(
            f"pipeline configuration differs across ranks (ranks {bad} differ from rank 0): "
            f"{diffs}. Start every rank with the same configuration"
        )
