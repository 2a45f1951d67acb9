"""Process layout of data parallel × pipeline parallel, and process-group start-up.

Without a ``DeviceMesh`` the world of ``dp · P`` ranks is laid out stage-fastest:
``rank = dp_rank · P + stage``, i.e. the mesh ``(dp, pp)``. Every rank creates the same groups
in the same order: one pipeline group per replica, one data-parallel group per stage, one
tied-weights group {first, last stage} per replica, and one group of all ranks, each with the
executor's timeout.

Set-up collectives (joining the process group, the start-up checks, creating the groups) are
bounded like the executor's step waits: a peer that is gone or silent past the timeout ends the
set-up with one :class:`~asyncpp.pipeline.PipelineError` naming this rank, the phase and the
ranks it waited for (:func:`setup_phase`), not a backend's raw "Connection closed by peer".
"""

from __future__ import annotations

import contextlib
import datetime
import logging
import os
import re
from dataclasses import dataclass

import torch
import torch.distributed as dist

log = logging.getLogger(__name__)


def _timeout(seconds: float) -> datetime.timedelta:
    if not (isinstance(seconds, (int, float)) and seconds > 0):
        raise ValueError(f"timeout must be a positive number of seconds, got {seconds!r}")
    return datetime.timedelta(seconds=float(seconds))


def init_distributed(device: str | torch.device | None = None,
                     timeout: float = 600.0) -> torch.device:
    """Initialise the default process group from the ``torchrun`` environment (RANK,
    WORLD_SIZE, MASTER_ADDR, MASTER_PORT) if needed, with backend NCCL for a CUDA device and
    gloo otherwise; returns the device this rank should use (``cuda:LOCAL_RANK`` for CUDA)."""
    dev = torch.device(device) if device is not None else (
        torch.device("cuda") if torch.cuda.is_available() else torch.device("cpu"))
    if dev.type == "cuda" and dev.index is None:
        dev = torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")))
    if dev.type == "cuda":
        torch.cuda.set_device(dev)
    if not dist.is_initialized():
        missing = [k for k in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")
                   if k not in os.environ]
        if missing:
            raise ValueError(
                f"no process group and no torchrun environment (missing {', '.join(missing)}); "
                "launch with `torchrun --nproc-per-node=N ...`"
            )
        backend = "nccl" if dev.type == "cuda" else "gloo"
        kwargs = {"device_id": dev} if dev.type == "cuda" else {}
        with setup_phase("joining the process group", timeout):
            dist.init_process_group(backend, timeout=_timeout(timeout), **kwargs)
    return dev


def _peers(group=None) -> list[int]:
    """The global ranks of ``group`` (default: the world) other than this one."""
    if not dist.is_initialized():
        world = int(os.environ.get("WORLD_SIZE", "1"))
        me = int(os.environ.get("RANK", "0"))
        return [r for r in range(world) if r != me]
    me = dist.get_rank()
    ranks = (dist.get_process_group_ranks(group) if group is not None
             else range(dist.get_world_size()))
    return [r for r in ranks if r != me]


def setup_error(what: str, timeout: float, error: BaseException, group=None):
    """The :class:`~asyncpp.pipeline.PipelineError` of a set-up collective that failed:
    ``rank R: <what> did not complete within the T s timeout (waiting for rank(s) ...)`` or
    ``... failed: a peer is gone (waiting for ...)``, with the backend's first line."""
    from . import PipelineError  # the executor's error class (imported late: no cycle)

    me = dist.get_rank() if dist.is_initialized() else int(os.environ.get("RANK", "0"))
    peers = _peers(group)
    whom = (f"rank {peers[0]}" if len(peers) == 1 else f"ranks {peers}") if peers else "peers"
    text = str(error).strip()
    first = next((ln.strip() for ln in text.splitlines() if ln.strip()), type(error).__name__)
    first = re.sub(r"^\[[^\]]*\]\s*", "", first)  # gloo's "[.../pair.cc:553] " source tag
    first = first.split(". ")[0].rstrip(".")[:160]
    low = text.lower()
    if "timed out" in low or "timeout" in low or "time out" in low:
        how = f"did not complete within the {timeout:g} s timeout (run.peer_timeout_s)"
    else:
        how = "failed: the peer is gone or broke the connection"
    return PipelineError(f"rank {me}: {what} {how}, waiting for {whom} ({first}); check that "
                         "rank's output, then relaunch every rank")


@contextlib.contextmanager
def setup_phase(what: str, timeout: float, group=None):
    """Run a set-up collective (its wait is bounded by the process group's timeout, which
    :func:`init_distributed` sets to ``timeout``): a backend error inside becomes
    :func:`setup_error`'s one-line :class:`~asyncpp.pipeline.PipelineError`."""
    try:
        yield
    except dist.DistError as e:
        raise setup_error(what, timeout, e, group) from None
    except RuntimeError as e:  # some gloo/TCPStore failures are plain RuntimeErrors
        low = str(e).lower()
        if not any(k in low for k in ("gloo", "nccl", "connection", "socket", "store",
                                      "timed out", "timeout", "peer")):
            raise
        raise setup_error(what, timeout, e, group) from None


@dataclass
class PipelineTopology:
    """Where this rank sits: pipeline stage and data-parallel replica, with their groups.

    ``stage_ranks[s]`` is the global rank of stage s in this rank's replica; the groups are
    ``None`` in a single process (P = 1, no data parallelism, no process group).
    """

    num_stages: int
    stage: int
    dp_size: int
    dp_rank: int
    stage_ranks: tuple[int, ...]
    pp_group: object = None
    dp_group: object = None
    tie_group: object = None
    world_group: object = None

    @property
    def is_first(self) -> bool:
        return self.stage == 0

    @property
    def is_last(self) -> bool:
        return self.stage == self.num_stages - 1

    @property
    def distributed(self) -> bool:
        return self.world_group is not None

    @classmethod
    def local(cls) -> PipelineTopology:
        """One process: one stage, no data parallelism, no communication."""
        return cls(1, 0, 1, 0, (0,))

    @classmethod
    def from_groups(cls, pp_group, dp_group=None, tie_group=None,
                    world_group=None) -> PipelineTopology:
        """Use existing process groups: ``pp_group`` holds this replica's stages in stage
        order (group rank = stage), ``dp_group`` the replicas of this stage, ``tie_group``
        {first, last stage} of this replica (defaults to ``pp_group`` when P = 2), and
        ``world_group`` every rank of the run (needed with ``dp_group``; it defaults to
        ``pp_group`` without data parallelism)."""
        if not dist.is_initialized():
            raise ValueError("from_groups needs an initialised process group")
        stage_ranks = tuple(dist.get_process_group_ranks(pp_group))
        num_stages = len(stage_ranks)
        stage = stage_ranks.index(dist.get_rank())
        if dp_group is not None:
            dp_size, dp_rank = dist.get_world_size(dp_group), dist.get_rank(dp_group)
            if world_group is None:
                raise ValueError("with a dp_group, pass world_group: the group of all ranks of "
                                 "this run (losses and the configuration check use it)")
        else:
            dp_size, dp_rank = 1, 0
            world_group = world_group if world_group is not None else pp_group
        if tie_group is None and num_stages == 2:
            tie_group = pp_group
        return cls(num_stages, stage, dp_size, dp_rank, stage_ranks, pp_group,
                   dp_group if dp_size > 1 else None, tie_group, world_group)

    @classmethod
    def create(cls, num_stages: int, *, mesh=None, timeout: float = 600.0) -> PipelineTopology:
        """Build the layout (collective: every rank must call it with the same arguments).

        ``mesh``: an optional ``DeviceMesh`` with dimension names ``("dp", "pp")`` or
        ``("pp",)``; otherwise the world is split stage-fastest into ``world / num_stages``
        replicas.
        """
        if not isinstance(num_stages, int) or num_stages < 1:
            raise ValueError(f"num_stages must be a positive integer, got {num_stages!r}")
        if not dist.is_initialized():
            if num_stages == 1:
                return cls.local()
            raise ValueError(
                f"a {num_stages}-stage pipeline needs a process group; call "
                "asyncpp.pipeline.init_distributed() under torchrun first"
            )
        td = _timeout(timeout)
        world, rank = dist.get_world_size(), dist.get_rank()
        world_group = dist.new_group(list(range(world)), timeout=td)
        if mesh is not None:
            names = tuple(mesh.mesh_dim_names or ())
            if "pp" not in names:
                raise ValueError(f"the device mesh needs a dimension named 'pp', got {names}")
            pp_group = mesh.get_group("pp")
            stage = mesh.get_local_rank("pp")
            pp_ranks = tuple(dist.get_process_group_ranks(pp_group))
            if len(pp_ranks) != num_stages:
                raise ValueError(
                    f"the mesh's 'pp' dimension has {len(pp_ranks)} ranks, expected "
                    f"num_stages={num_stages}"
                )
            if "dp" in names:
                dp_group = mesh.get_group("dp")
                dp_size, dp_rank = mesh.size(names.index("dp")), mesh.get_local_rank("dp")
            else:
                dp_group, dp_size, dp_rank = None, 1, 0
            # Tied-weight groups: {first, last} of every replica, created on all ranks.
            all_pp = [None] * world
            dist.all_gather_object(all_pp, pp_ranks, group=world_group)
            tie_group = None
            if num_stages > 1:
                for reps in sorted(set(all_pp)):
                    g = dist.new_group([reps[0], reps[-1]], timeout=td)
                    if reps == pp_ranks:
                        tie_group = g
            return cls(num_stages, stage, dp_size, dp_rank, pp_ranks, pp_group, dp_group,
                       tie_group, world_group)
        if world % num_stages:
            raise ValueError(
                f"world size {world} is not a multiple of num_stages={num_stages}; launch "
                f"dp × {num_stages} processes"
            )
        dp_size = world // num_stages
        dp_rank, stage = divmod(rank, num_stages)
        pp_group = dp_group = tie_group = None
        for d in range(dp_size):
            g = dist.new_group([d * num_stages + s for s in range(num_stages)], timeout=td)
            if d == dp_rank:
                pp_group = g
        for s in range(num_stages):
            g = dist.new_group([d * num_stages + s for d in range(dp_size)], timeout=td)
            if s == stage:
                dp_group = g
        if num_stages > 1:
            for d in range(dp_size):
                g = dist.new_group([d * num_stages, d * num_stages + num_stages - 1], timeout=td)
                if d == dp_rank:
                    tie_group = g
        stage_ranks = tuple(dp_rank * num_stages + s for s in range(num_stages))
        return cls(num_stages, stage, dp_size, dp_rank, stage_ranks, pp_group,
                   dp_group if dp_size > 1 else None, tie_group, world_group)
