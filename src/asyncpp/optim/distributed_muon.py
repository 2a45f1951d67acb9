r"""Distributed Muon: Newton–Schulz work and momentum split across a data-parallel group.

Inside one pipeline stage the data-parallel replicas all hold the same parameters and — once
the caller has all-reduced them — the same averaged gradient
:math:`\bar g = \frac{1}{R}\sum_{r} g^{(r)}`. Plain Muon would then run the identical
Newton–Schulz iteration on every replica. :class:`DistributedMuon` instead assigns every Muon
matrix to one *owner* rank (ZeRO-1 style):

.. math::
    \begin{aligned}
    &\text{owner } o(i) \in \{0,\dots,R-1\} \text{ of matrix } i
        &&\text{(deterministic, balanced by Newton–Schulz FLOPs)}\\
    &\text{on } o(i):\ B_t^i = \beta B_{t-1}^i + (1-\beta)\bar g_t^i,\quad
        \theta_t^i = (1-\gamma\lambda)\theta_{t-1}^i - \gamma\, r(A,B)\,
        \mathrm{NS}(\tilde B_t^i)
        &&\text{(exactly :class:`~asyncpp.optim.Muon`'s update)}\\
    &\text{on every rank:}\ \theta_t^i \leftarrow \mathrm{allgather}_{o(i)}(\theta_t^i)
        &&\text{(parameters identical on all ranks)}
    \end{aligned}

so each rank keeps the momentum buffer :math:`B^i` only for the matrices it owns
(:math:`\approx 1/R` of Muon's optimizer memory) and orthogonalizes only its share, batched
by shape as Muon does. Groups with ``use_muon=False`` (AdamW) are replicated: every rank steps
them identically from the same averaged gradient and keeps their full state.

Contract with the caller:

* **Gradients are already averaged across the group** (``all_reduce`` then divide, or DDP);
  :meth:`DistributedMuon.step` reads only the owner's gradient for a Muon matrix and never
  reduces gradients itself.
* **Parameters start identical on every rank** (as DDP guarantees by broadcasting at start-up);
  afterwards the all-gather keeps them bitwise identical.
* **Whether a parameter has a gradient is decided collectively.** Each step begins with one
  ``all_reduce`` of a has-gradient mask; a parameter is stepped iff it has a gradient, and a
  parameter whose ``.grad`` is set on some ranks but ``None`` on others raises the same
  :class:`ValueError` on every rank (no rank is left waiting in a collective).

Checkpoints: :meth:`~DistributedMuon.state_dict` is this rank's *shard* (its momentum buffers,
all AdamW state, and a ``"distributed_muon"`` entry recording rank, world size and owners);
load it back with :meth:`~DistributedMuon.load_state_dict` on the same rank of an identical
group. :meth:`~DistributedMuon.consolidated_state_dict` (collective) gathers the full state in
:class:`~asyncpp.optim.Muon`'s format; that dict loads into a plain ``Muon`` or into a
``DistributedMuon`` over any number of ranks (each keeps its own share).

Backends: gloo (CPU tensors) and NCCL (the rank's GPU); the collectives run on the device of
the Muon parameters, which must all be on one device per rank.
"""

from __future__ import annotations

import logging
import zlib
from itertools import chain

import torch
import torch.distributed as dist
from torch import Tensor

from .muon import Muon

logger = logging.getLogger(__name__)

__all__ = ["DistributedMuon", "newton_schulz_cost"]

_META_KEY = "distributed_muon"
_ADAMW = -1  # owner code of replicated (use_muon=False) parameters


def newton_schulz_cost(shape: torch.Size | tuple[int, ...], ns_steps: int) -> int:
    r"""FLOPs of Newton–Schulz on a parameter of ``shape`` (a matrix or a stack of them):

    .. math::
        c = N \cdot \max(k, 1) \cdot (4 m^2 n + 2 m^3) + \mathrm{numel},
        \qquad m = \min(A, B),\ n = \max(A, B),

    for ``N`` matrices of shape ``(A, B)`` and ``k`` iterations (per iteration
    :math:`X X^\top`, :math:`bA + cA^2` and :math:`BX`); the ``numel`` term counts the
    element-wise momentum work and keeps the cost positive when ``k = 0``.
    """
    A, B = int(shape[-2]), int(shape[-1])
    count = 1
    for d in shape[:-2]:
        count *= int(d)
    m, n = min(A, B), max(A, B)
    return count * max(int(ns_steps), 1) * (4 * m * m * n + 2 * m ** 3) + count * A * B


class DistributedMuon(Muon):
    r"""Muon whose matrices (momentum and Newton–Schulz) are sharded over a process group.

    The update is :class:`~asyncpp.optim.Muon`'s, parameter for parameter (see the module
    docstring for the equations and the caller's contract: gradients already averaged across
    the group, parameters identical on every rank).

    Args:
        params: tensors or parameter groups, exactly as for :class:`~asyncpp.optim.Muon`
            (groups with ``use_muon=False`` are AdamW and are replicated on every rank).
        process_group: the data-parallel group to shard over; ``None`` means the default group
            when ``torch.distributed`` is initialized, and a single process otherwise (then
            the optimizer is plain Muon and runs no collectives).
        bucket_numel: largest number of elements one rank contributes to one all-gather; the
            parameter exchange runs in as many rounds as needed, which caps the temporary
            buffers at about ``world_size * bucket_numel`` elements.
        muon_hparams: every hyper-parameter of :class:`~asyncpp.optim.Muon` (``lr``,
            ``momentum``, ``nesterov``, ``weight_decay``, ``ns_*``, ``adjust_lr_fn``,
            ``adamw_*``), with the same defaults.

    Matrices are assigned to owners once, at construction, by longest-processing-time
    greedy on :func:`newton_schulz_cost` (ties broken by parameter index, then rank), so
    every rank computes the same assignment from the shapes alone. Construction is a
    collective: the ranks check that their parameter layouts and hyper-parameters agree.
    """

    def __init__(self, params, process_group=None, *, bucket_numel: int = 1 << 26,
                 **muon_hparams) -> None:
        if not (isinstance(bucket_numel, int) and bucket_numel > 0):
            raise ValueError(f"bucket_numel must be a positive integer, got {bucket_numel!r}")
        if process_group is not None and not dist.is_initialized():
            raise ValueError(
                "DistributedMuon was given a process_group but torch.distributed is not "
                "initialized; call torch.distributed.init_process_group first, or pass "
                "process_group=None for a single process"
            )
        self._owner: dict[int, int] | None = None  # id(param) -> owner rank or _ADAMW
        super().__init__(params, **muon_hparams)
        self._group = process_group
        if dist.is_initialized():
            self._rank = dist.get_rank(process_group)
            self._world = dist.get_world_size(process_group)
            if self._rank < 0:
                raise ValueError(
                    "this process is not a member of the process_group given to "
                    "DistributedMuon; build it only on the ranks of that group"
                )
        else:
            self._rank, self._world = 0, 1
        self._bucket_numel = bucket_numel
        devices = {p.device for g in self.param_groups if g["use_muon"] for p in g["params"]}
        if len(devices) != 1:
            raise ValueError(
                f"DistributedMuon needs all Muon parameters on one device per rank, got "
                f"{sorted(str(d) for d in devices)}; move the model to one device first"
            )
        self._device = devices.pop()
        self._loads = [0] * self._world
        self._owner = {}
        self._assign(self.param_groups)
        self._check_layout_agrees()
        logger.debug("DistributedMuon rank %d/%d: Newton–Schulz loads %s",
                     self._rank, self._world, self._loads)

    # ---------------------------------------------------------------- public inspection
    @property
    def rank(self) -> int:
        """This process's rank in the optimizer's process group."""
        return self._rank

    @property
    def world_size(self) -> int:
        """Number of ranks the Muon matrices are sharded over."""
        return self._world

    def owner(self, p: Tensor) -> int:
        """Rank that orthogonalizes ``p`` and holds its momentum (``-1``: AdamW, replicated)."""
        try:
            return self._owner[id(p)]
        except KeyError:
            raise ValueError(
                f"tensor of shape {tuple(p.shape)} is not a parameter of this optimizer"
            ) from None

    def owned_params(self) -> list[Tensor]:
        """The Muon matrices this rank owns: :math:`\\{\\theta^i : o(i) = \\text{rank}\\}`."""
        return [p for p in self._flat_params() if self._owner[id(p)] == self._rank]

    # ---------------------------------------------------------------- assignment
    def add_param_group(self, param_group: dict) -> None:
        """Add a group; after construction its Muon matrices are assigned to the least-loaded
        ranks (existing owners never move). Every rank must add the same group."""
        super().add_param_group(param_group)
        if self._owner is None:  # still inside Muon.__init__; assigned afterwards
            return
        group = self.param_groups[-1]
        if group["use_muon"]:
            for p in group["params"]:
                if p.ndim not in (2, 3):
                    raise ValueError(
                        f"Muon groups take 2-D matrices or 3-D expert stacks, got a tensor of "
                        f"shape {tuple(p.shape)}; put it in a group with use_muon=False"
                    )
                if p.device != self._device:
                    raise ValueError(
                        f"DistributedMuon keeps its Muon parameters on {self._device}, got one "
                        f"on {p.device}; move it there first"
                    )
        self._assign([group])

    def _assign(self, groups) -> None:
        """Longest-processing-time greedy: heaviest matrix first, to the least-loaded rank."""
        jobs = []
        for g in groups:
            for p in g["params"]:
                index = len(self._owner)
                self._owner[id(p)] = _ADAMW
                if g["use_muon"]:
                    jobs.append((newton_schulz_cost(p.shape, g["ns_steps"]), index, p))
        for cost, _, p in sorted(jobs, key=lambda j: (-j[0], j[1])):
            r = min(range(self._world), key=lambda q: (self._loads[q], q))
            self._owner[id(p)] = r
            self._loads[r] += cost

    def _check_layout_agrees(self) -> None:
        """Collective: every rank must hold the same parameter shapes, dtypes and groups."""
        if self._world == 1:
            return
        desc = []
        for g in self.param_groups:
            hp = sorted((k, repr(v)) for k, v in g.items() if k not in ("params", "param_names"))
            desc.append(repr(hp))
            desc.extend(f"{tuple(p.shape)}:{p.dtype}" for p in g["params"])
        sig = torch.tensor(
            [len(desc), zlib.crc32("\n".join(desc).encode())], dtype=torch.int64,
            device=self._device,
        )
        got = [torch.empty_like(sig) for _ in range(self._world)]
        dist.all_gather(got, sig, group=self._group)
        got = [tuple(t.tolist()) for t in got]
        if len(set(got)) != 1:
            differing = [r for r, s in enumerate(got) if s != got[0]]
            raise ValueError(
                f"DistributedMuon: ranks {differing} hold a different parameter layout or "
                f"different hyper-parameters than rank 0; build the same model and optimizer "
                f"on every rank of the process group"
            )

    def _flat_params(self) -> list[Tensor]:
        return [p for g in self.param_groups for p in g["params"]]

    # ---------------------------------------------------------------- step
    @torch.no_grad()
    def step(self, closure=None):
        r"""One step of Muon over all groups, with the Muon matrices sharded:

        .. math::
            \theta^i &\leftarrow \mathrm{allgather}_{o(i)}\big(\mathrm{Muon}(\theta^i,
            \bar g^i, B^i)\big)\ \text{for Muon matrices},\\
            \theta^j &\leftarrow \mathrm{AdamW}(\theta^j, \bar g^j)\ \text{locally otherwise}.

        Collective on the group: one ``all_reduce`` of the has-gradient mask, then the
        all-gather of the updated matrices. Parameters with no gradient (on every rank) are
        skipped; mixed presence raises :class:`ValueError` on every rank.
        """
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        self._agree_on_gradients()
        exchange: list[tuple[int, Tensor]] = []
        for group in self.param_groups:
            if not group["use_muon"]:
                self._adamw_group(group)
                continue
            stepped = [p for p in group["params"] if p.grad is not None]
            mine = [p for p in stepped if self._owner[id(p)] == self._rank]
            if mine:
                self._muon_group({**group, "params": mine})
            exchange.extend((self._owner[id(p)], p) for p in stepped)
        self._gather_from_owners(exchange)
        return loss

    def _agree_on_gradients(self) -> None:
        """Collective check that every rank has the same set of (dense) gradients."""
        params = self._flat_params()
        if self._world == 1:
            for p in params:
                if p.grad is not None and p.grad.is_sparse:
                    raise RuntimeError("Muon does not support sparse gradients")
            return
        n = len(params)
        flags = [0] * (2 * n)
        for i, p in enumerate(params):
            if p.grad is not None:
                flags[i] = 1
                flags[n + i] = int(p.grad.is_sparse)
        mask = torch.tensor(flags, dtype=torch.int32, device=self._device)
        dist.all_reduce(mask, op=dist.ReduceOp.SUM, group=self._group)
        counts = mask.tolist()
        if any(counts[n:]):
            raise RuntimeError("Muon does not support sparse gradients")
        mixed = [i for i in range(n) if counts[i] not in (0, self._world)]
        if mixed:
            i = mixed[0]
            raise ValueError(
                f"DistributedMuon: parameter #{i} (shape {tuple(params[i].shape)}) has a "
                f"gradient on {counts[i]} of {self._world} ranks ({len(mixed)} such "
                f"parameter(s)); the gradients must already be all-reduced across the process "
                f"group, so set .grad to the averaged gradient (or to None) on every rank "
                f"before step()"
            )

    # ---------------------------------------------------------------- communication
    def _chunks(self, tensors: list[Tensor]) -> list[list[Tensor]]:
        """Consecutive runs of ``tensors`` of at most ``bucket_numel`` elements (≥ 1 tensor)."""
        out: list[list[Tensor]] = []
        size = self._bucket_numel + 1
        for t in tensors:
            if size + t.numel() > self._bucket_numel and (not out or out[-1]):
                out.append([])
                size = 0
            out[-1].append(t)
            size += t.numel()
        return out

    def _gather_from_owners(self, items: list[tuple[int, Tensor]]) -> None:
        """Collective: afterwards every rank's tensor holds its owner's values.

        ``items`` lists ``(owner, tensor)`` in the same order on every rank. Tensors are
        grouped by dtype and sent as padded flat all-gathers of at most ``bucket_numel``
        elements per rank per round (same rounds on every rank, computed from the shapes).
        """
        if self._world == 1 or not items:
            return
        by_dtype: dict[torch.dtype, list[list[Tensor]]] = {}
        for owner, t in items:
            by_dtype.setdefault(t.dtype, [[] for _ in range(self._world)])[owner].append(t)
        for dtype, per_rank in by_dtype.items():
            chunks = [self._chunks(ts) for ts in per_rank]
            for k in range(max(len(c) for c in chunks)):
                parts = [c[k] if k < len(c) else [] for c in chunks]
                sizes = [sum(t.numel() for t in part) for part in parts]
                width = max(sizes)
                if width == 0:
                    continue
                mine = [t.reshape(-1) for t in parts[self._rank]]
                pad = width - sizes[self._rank]
                if pad:
                    mine.append(torch.zeros(pad, dtype=dtype, device=self._device))
                send = torch.cat(mine) if len(mine) > 1 else mine[0].contiguous()
                recv = [torch.empty(width, dtype=dtype, device=self._device)
                        for _ in range(self._world)]
                dist.all_gather(recv, send, group=self._group)
                for r, part in enumerate(parts):
                    if r == self._rank:
                        continue
                    offset = 0
                    for t in part:
                        t.copy_(recv[r][offset:offset + t.numel()].view(t.shape))
                        offset += t.numel()

    # ---------------------------------------------------------------- checkpoints
    def _owners_by_index(self) -> list[int]:
        return [self._owner[id(p)] for p in self._flat_params()]

    def state_dict(self) -> dict:
        """This rank's shard: ``torch.optim`` format (momentum of the owned matrices, all AdamW
        state) plus ``"distributed_muon": {"rank", "world_size", "owners"}`` (owner per
        parameter index, ``-1`` for AdamW). Not collective."""
        sd = super().state_dict()
        sd[_META_KEY] = {"rank": self._rank, "world_size": self._world,
                         "owners": self._owners_by_index()}
        return sd

    def load_state_dict(self, state_dict: dict) -> None:
        """Load a shard saved by :meth:`state_dict` on the same rank of an identical group, or
        a full state dict (:meth:`consolidated_state_dict`, or ``Muon.state_dict()``), of
        which this rank keeps the momentum of the matrices it owns. Not collective."""
        meta = state_dict.get(_META_KEY)
        sd = {k: v for k, v in state_dict.items() if k != _META_KEY}
        if meta is not None:
            mine = {"rank": self._rank, "world_size": self._world,
                    "owners": self._owners_by_index()}
            if meta != mine:
                raise ValueError(
                    f"this state dict is the shard of rank {meta.get('rank')} of a "
                    f"{meta.get('world_size')}-rank DistributedMuon, but this optimizer is rank "
                    f"{self._rank} of {self._world}"
                    + ("" if meta.get("owners") == mine["owners"] else
                       " with a different matrix-to-rank assignment")
                    + "; load each rank's own shard, or save consolidated_state_dict() and "
                    "load that on any number of ranks"
                )
        else:
            if "param_groups" not in sd or "state" not in sd:
                raise ValueError(
                    "not an optimizer state dict (expected keys 'state' and 'param_groups'); "
                    "pass what DistributedMuon.state_dict() or consolidated_state_dict() returned"
                )
            saved = list(chain.from_iterable(g["params"] for g in sd["param_groups"]))
            owners = self._owners_by_index()
            if len(saved) != len(owners):
                raise ValueError(
                    f"the state dict holds {len(saved)} parameters, this optimizer "
                    f"{len(owners)}; build the optimizer over the same parameter groups"
                )
            position = {k: i for i, k in enumerate(saved)}
            sd["state"] = {
                k: v for k, v in sd["state"].items()
                if k not in position or owners[position[k]] in (_ADAMW, self._rank)
            }
        super().load_state_dict(sd)

    def consolidated_state_dict(self, dst: int | None = None) -> dict | None:
        """Collective: the full optimizer state in :class:`~asyncpp.optim.Muon`'s format
        (every matrix's momentum gathered from its owner), equal to what a single-process
        Muon stepped on the same gradients would return from ``state_dict()``.

        Returned on every rank (``dst=None``) or only on rank ``dst`` (others get ``None``).
        During the call each rank temporarily holds the full momentum; save the result with
        ``torch.save`` and restore it with :meth:`load_state_dict` on any number of ranks.
        """
        if dst is not None and not (isinstance(dst, int) and 0 <= dst < self._world):
            raise ValueError(f"dst must be a rank in [0, {self._world}) or None, got {dst!r}")
        params = self._flat_params()
        owners = self._owners_by_index()
        flags = [int(o == self._rank and "momentum_buffer" in self.state.get(p, {}))
                 for p, o in zip(params, owners)]
        if self._world > 1:
            mask = torch.tensor(flags, dtype=torch.int32, device=self._device)
            dist.all_reduce(mask, op=dist.ReduceOp.SUM, group=self._group)
            flags = mask.tolist()
        gathered: dict[int, Tensor] = {}
        items = []
        for i, (p, o) in enumerate(zip(params, owners)):
            if not flags[i]:
                continue
            buf = self.state[p]["momentum_buffer"] if o == self._rank else torch.empty_like(p)
            gathered[i] = buf
            items.append((o, buf))
        self._gather_from_owners(items)
        if dst is not None and dst != self._rank:
            return None
        sd = super().state_dict()
        state = sd["state"]
        for i, buf in gathered.items():
            state.setdefault(i, {})["momentum_buffer"] = buf
        sd["state"] = dict(sorted(state.items()))
        return sd
