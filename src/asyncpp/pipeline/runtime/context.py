r"""The state of one stage on its rank: module, weight versions, accumulators, in-flight
microbatches, messages, and the updates queued for it. A rank holds one context per stage it
runs (one, or several: WPipe's two partitions, a looped placement's P/R stages).

**Weight versions.** The optimizer owns the stage's parameters (the *master*, always the newest
version). A version is a set of tensors that alias a storage nobody writes again: forwards run
``functional_call(module, leaves, x)`` on fresh leaf tensors over the version's storage (each
with its own autograd version counter), so gradients of a step accumulate in that step's
leaves and the weights an in-flight microbatch saved for its backward are never modified.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
from torch import Tensor, nn

from ...delay import DelayedOptimizer


def alias(t: Tensor) -> Tensor:
    """A new tensor over ``t``'s storage with its own autograd version counter."""
    # set_ on a fresh tensor that does not require grad records nothing, so no no_grad()
    # context is needed: the alias is made once per weight per step and per update
    return torch.empty((0,), dtype=t.dtype, device=t.device).set_(
        t.untyped_storage(), t.storage_offset(), t.size(), t.stride())


@dataclass
class PendingUpdate:
    """An update whose gradient is ready but which waits for its reductions, or for the
    moment a forward needs the version it produces (:class:`~.updates.UpdateQueue`)."""

    action: object
    grads: dict
    stale: dict
    norm_work: object = None
    norm_sq: Tensor | None = None
    tie_works: list = field(default_factory=list)
    tie_done: object = None

    def ready(self) -> bool:
        works = [w for w in [self.norm_work, *self.tie_works] if w is not None]
        return all(w.is_completed() for w in works)


@dataclass
class StageContext:
    """One stage of the pipeline as its rank runs it (see the module docstring)."""

    stage: int
    num_stages: int
    module: nn.Module
    optimizer: DelayedOptimizer
    params: list[tuple[str, nn.Parameter]]
    tied: dict[str, str] = field(default_factory=dict)
    versions: dict[int, dict[str, Tensor]] = field(default_factory=dict)
    newest: int = 0
    next_item: tuple[int, int] = (0, 0)
    max_forwarded: int = -1
    updates_issued: int = 0
    last_norm_sq: Tensor | None = None
    pending: list[PendingUpdate] = field(default_factory=list)
    spare: list[Tensor] | None = None
    """The storage of the last retired version, reused by the next :meth:`move_master`."""
    # per call (reset by begin_call)
    inflight: dict = field(default_factory=dict)
    accum: dict = field(default_factory=dict)
    in_msgs: dict = field(default_factory=dict)
    out_msgs: dict = field(default_factory=dict)
    losses: dict = field(default_factory=dict)
    grad_sq: dict = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.name_of = {id(p): n for n, p in self.params}
        if not self.versions:
            self.versions = {0: self.alias_master()}

    @property
    def is_first(self) -> bool:
        return self.stage == 0

    @property
    def is_last(self) -> bool:
        return self.stage == self.num_stages - 1

    def alias_master(self) -> dict[str, Tensor]:
        return {n: alias(p.detach()) for n, p in self.params}

    def next_version(self, replaced: int, need: int) -> dict[str, Tensor]:
        """The tensors of the version an update just made, which replaced version
        ``replaced``: that version's own aliases when the update ran in place on their storage
        and nothing reads ``replaced`` again (older than ``need``, the oldest version still
        read: it would be retired at once) — the same storage and values, without three
        tensor operations per weight — else fresh aliases of the master."""
        ws = self.versions.get(replaced)
        if ws is not None and replaced < need and all(
                ws[n].data_ptr() == p.data_ptr() for n, p in self.params):
            del self.versions[replaced]
            return ws
        return self.alias_master()

    def begin_call(self) -> None:
        """Forget the messages and microbatches of a finished call (a drained pipeline)."""
        self.inflight, self.accum = {}, {}
        self.in_msgs, self.out_msgs, self.losses, self.grad_sq = {}, {}, {}, {}

    def oldest_inflight(self, default: int) -> int:
        """The oldest version an in-flight microbatch (forwarded, not yet backwarded) read."""
        return min((v for *_, v in self.inflight.values()), default=default)

    def retire(self, version: int) -> None:
        """Drop ``version``; keep its storage as the spare buffer the next copy of the master
        reuses (unless the master or another live version still shares it)."""
        ws = self.versions.pop(version)
        live = {p.untyped_storage().data_ptr() for _, p in self.params}
        live.update(t.untyped_storage().data_ptr() for vs in self.versions.values()
                    for t in vs.values())
        if all(t.untyped_storage().data_ptr() not in live for t in ws.values()):
            self.spare = [ws[n] for n, _ in self.params]

    @torch.no_grad()
    def move_master(self) -> None:
        r"""Give the master (the parameters) fresh storage holding the same values, so that the
        update about to run in place leaves the version it replaces intact: the retired
        version's buffer when there is one (``torch._foreach_copy_``, no allocation), else a
        clone."""
        spare, self.spare = self.spare, None
        masters = [p.data for _, p in self.params]
        if spare is not None and all(b.shape == m.shape and b.dtype == m.dtype
                                     for b, m in zip(spare, masters)):
            torch._foreach_copy_(spare, masters)
            for (_, p), buf in zip(self.params, spare):
                p.data = buf
        else:
            for _, p in self.params:
                p.data = p.data.clone()
