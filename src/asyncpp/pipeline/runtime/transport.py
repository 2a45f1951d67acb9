r"""Messages between stages: activation headers, one ``batch_isend_irecv`` per run of
consecutive send/receive actions, named waits with a timeout, and the drain of finished sends.

Sends are non-blocking and complete in the background; receives are waited with the
``timeout``. Consecutive send/receive actions are posted together with one
``batch_isend_irecv`` — on gloo (CPU) as on NCCL (GPU), so the CPU tests run the code path
multi-GPU users run — in the same deterministic order on both peers. The first activation
message of each call on each stream carries a small header (the :class:`~.messages.Layout`:
dtype and shape of each part); later microbatches reuse it. A tuple message travels packed in
one buffer (:mod:`.messages`). When a rank holds several stages, a message between two stages
of one rank is handed over in memory, and each stream between two ranks (source stage, kind)
has its own tag, so messages of different stage pairs between the same two ranks never match
each other (gloo matches by tag; NCCL ignores tags, so several stages per rank need gloo).

Time spent here is charged to the rank's
:class:`~asyncpp.pipeline.runtime.stage_clock.StageClock`: posting and the waits for sends and
collectives as communication, a blocked receive as waiting for the peer.
"""

from __future__ import annotations

from datetime import timedelta

import torch
import torch.distributed as dist
from torch import Tensor

from ..actions import ACTIVATION, is_send, to_str
from . import messages
from .errors import PipelineError
from .messages import Layout
from .stage_clock import COMM, WAIT, StageClock

_DTYPES = [torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int64,
           torch.int32, torch.bool, torch.uint8, torch.int8, torch.int16]
_MAX_DIMS = 8
_MAX_PARTS = 8
_KEY = 4  # int64 words per dict key: its UTF-8 bytes, zero-padded (at most 32)
_PART = 2 + _MAX_DIMS + _KEY  # (dtype, ndim, dims…, key…) per part
_HEADER = 2 + _MAX_PARTS * _PART  # kind (0 tensor, 1 tuple, 2 dict), parts, then the parts


def _key_words(key: str) -> list[int]:
    raw = key.encode("utf-8")
    if len(raw) > 8 * _KEY:
        raise ValueError(f"a stage output's dict key may have at most {8 * _KEY} bytes, got "
                         f"{key!r}")
    raw = raw.ljust(8 * _KEY, b"\0")
    return [int.from_bytes(raw[i:i + 8], "little", signed=True) for i in range(0, len(raw), 8)]


def _key_text(words) -> str:
    raw = b"".join(int(w).to_bytes(8, "little", signed=True) for w in words)
    return raw.rstrip(b"\0").decode("utf-8")


class Transport:
    """Point-to-point messages and waits of one rank.

    ``stage_rank[s]``: the global rank running stage s; ``local``: the stages this rank runs
    (a message between two of them never leaves the process); ``clock``: where the time of
    posts and waits is charged (default: a clock nobody reads)."""

    def __init__(self, topo, timeout: float, device: torch.device, stage_rank: list[int],
                 local: set[int], tagged: bool, clock: StageClock | None = None) -> None:
        self.topo = topo
        self.timeout = timeout
        self.device = device
        self.stage_rank = stage_rank
        self.local = local
        self.tagged = tagged
        self.meta: dict[int, Layout] = {}
        self.clock = clock if clock is not None else StageClock(sorted(local))
        self.begin_call()

    def begin_call(self) -> None:
        self.send_works: list = []
        self.header_sent: set[int] = set()
        self.header_recvd: set[int] = set()

    # -- waits -----------------------------------------------------------------------------
    def wait(self, work, what, peer=None, kind: str = COMM) -> None:
        """Wait for ``work`` (a ``torch.distributed`` work handle) up to the timeout;
        :class:`PipelineError` naming this rank, ``what`` and ``peer`` (a rank, or the list of
        ranks a collective waits for) if it does not finish. The time is charged as ``kind``
        (``WAIT`` for a receive: the peer's message is not there yet). ``what`` may be a
        callable giving the text, formatted only if the wait fails (a receive per action)."""
        if work is None:
            return
        self.clock.push(kind)
        try:
            ok = work.wait(timeout=timedelta(seconds=self.timeout))
        except Exception as e:  # gloo/NCCL report timeouts and closed peers as RuntimeError
            raise self.error(what, peer, e) from e
        finally:
            self.clock.pop()
        if ok is False:
            raise self.error(what, peer, "timed out")

    def error(self, what, peer, cause) -> PipelineError:
        if callable(what):
            what = what()
        t = self.topo
        who = f"rank {dist.get_rank()} (stage {t.stage}, dp {t.dp_rank})" if t.distributed \
            else "this process"
        if isinstance(peer, (list, tuple)):
            src = (f" from rank {peer[0]}" if len(peer) == 1 else
                   f" from ranks {', '.join(map(str, peer))}") if peer else ""
        else:
            src = f" from rank {peer}" if peer is not None else ""
        return PipelineError(
            f"{who}: {what}{src} did not complete within the {self.timeout:g} s timeout or the "
            f"peer is gone — a peer process died, stalled, or runs a different configuration "
            f"({cause})"
        )

    def others(self, group) -> list[int]:
        """The global ranks of ``group`` other than this one (whom a collective waits for)."""
        if group is None or not self.topo.distributed:
            return []
        me = dist.get_rank()
        return [r for r in dist.get_process_group_ranks(group) if r != me]

    # -- posting ---------------------------------------------------------------------------
    def post(self, ops: list[tuple[str, Tensor, int, int]]) -> list:
        """Post sends/receives (op, tensor, global peer rank, tag) together with one
        ``batch_isend_irecv``. Returns one work per op (NCCL may return a single work for the
        whole batch; callers handle both)."""
        g = self.topo.pp_group
        p2p = [dist.P2POp(dist.isend if op == "send" else dist.irecv, tensor, peer, g, tag)
               for op, tensor, peer, tag in ops]
        self.clock.push(COMM)
        try:
            return dist.batch_isend_irecv(p2p)
        except Exception as e:
            raise self.error("posting sends/receives", ops[0][2], e) from e
        finally:
            self.clock.pop()

    def _header(self, layout: Layout) -> Tensor:
        if len(layout.parts) > _MAX_PARTS:
            raise ValueError(f"a stage output may have at most {_MAX_PARTS} tensors, got "
                             f"{len(layout.parts)}")
        h = [2 if layout.keys is not None else int(layout.packed), len(layout.parts)]
        for i, (dtype, shape) in enumerate(layout.parts):
            if len(shape) > _MAX_DIMS or dtype not in _DTYPES:
                raise ValueError(f"stage outputs must be tensors of ≤ {_MAX_DIMS} dims with "
                                 f"dtype in {_DTYPES}, got {dtype} of shape {shape}")
            h += [_DTYPES.index(dtype), len(shape), *shape] + [0] * (_MAX_DIMS - len(shape))
            h += _key_words(layout.keys[i] if layout.keys is not None else "")
        h += [0] * (_HEADER - len(h))
        return torch.tensor(h, dtype=torch.int64, device=self.device)

    def _tag(self, src_stage: int, kind: str) -> int:
        return 2 * src_stage + (kind != ACTIVATION) if self.tagged else 0

    def communicate(self, group: list, contexts: dict, idle=None) -> None:
        """Post one run of consecutive Send/Recv actions together, then wait for the
        receives (sends complete in the background and are waited later). ``contexts``: the
        rank's stage contexts by stage; ``idle()``, if given, is called once before the first
        wait on a receive that has not arrived yet (work that fills the wait)."""
        ops, recvs = [], []
        for a in group:
            ctx = contexts[a.stage]
            key = (a.kind, a.step, a.mb)
            if a.peer in self.local:  # a stage of this rank: hand over in memory
                if is_send(a):
                    contexts[a.peer].in_msgs[key] = ctx.out_msgs.pop(key)
                elif key not in ctx.in_msgs:
                    raise PipelineError(f"{to_str(a)}: the message from stage {a.peer} of this "
                                        "rank was not sent before it is received (a program "
                                        "out of order)")
                continue
            peer = self.stage_rank[a.peer]
            src = a.stage if is_send(a) else a.peer
            tag = self._tag(src, a.kind)
            if is_send(a):
                msg = ctx.out_msgs.pop(key)
                if a.kind == ACTIVATION and a.peer not in self.header_sent:
                    self.header_sent.add(a.peer)
                    hdr = self._header(Layout.of(msg))
                    self.send_works.append((self.post([("send", hdr, peer, tag)]), hdr, [peer]))
                ops.append(("send", messages.pack(msg), peer, tag))
                continue
            buf = self._recv_buffer(a, ctx, peer, tag)
            ops.append(("recv", buf, peer, tag))
            recvs.append((len(ops) - 1, a, buf))
        if not ops:
            return
        works = self.post(ops)
        if len(works) != len(ops):
            # A coalesced batch (NCCL): one handle for all; wait for it now.
            for w in works:
                self.wait(w, "a batched pipeline exchange", sorted({o[2] for o in ops}), WAIT)
            works = [None] * len(ops)
        self.send_works.append(([w for (op, *_), w in zip(ops, works) if op == "send"],
                                [o[1] for o in ops if o[0] == "send"],
                                sorted({o[2] for o in ops if o[0] == "send"})))
        for idx, a, buf in recvs:
            if idle is not None and works[idx] is not None and not works[idx].is_completed():
                idle()
                idle = None
            self.finish_recv(a, (buf, works[idx]), contexts)
        self.drain_sends(keep=4 * len(self.stage_rank))

    # -- one receive at a time (several stages per rank: the executor picks the stage) ------
    def local_ready(self, a, contexts: dict) -> bool:
        """Whether receive ``a`` from a stage of this rank has its message (handed over)."""
        return (a.kind, a.step, a.mb) in contexts[a.stage].in_msgs

    def post_recv(self, a, contexts: dict, block: bool):
        """Post the remote receive ``a`` alone; returns ``(buffer, work)``. The first
        activation of a stream needs its header (the shape) first: that is received here
        when ``block`` is true, else None is returned and nothing is posted."""
        peer, tag = self.stage_rank[a.peer], self._tag(a.peer, a.kind)
        if a.kind == ACTIVATION and a.peer not in self.header_recvd and not block:
            return None
        buf = self._recv_buffer(a, contexts[a.stage], peer, tag)
        return buf, self.post([("recv", buf, peer, tag)])[0]

    def _recv_buffer(self, a, ctx, peer: int, tag: int) -> Tensor:
        """The buffer receive ``a`` fills: an activation's shape from its stream's header
        (received first, once per call), a gradient's from the forward output it is for."""
        dtype, shape = self._layout(a, ctx, peer, tag).wire()
        return torch.empty(shape, dtype=dtype, device=self.device)

    def _layout(self, a, ctx, peer: int, tag: int) -> Layout:
        if a.kind == ACTIVATION:
            if a.peer not in self.header_recvd:
                self.communicate_header(a, peer, tag)
            return self.meta[a.peer]
        return Layout.of(ctx.inflight[(a.step, a.mb)].out).differentiable()

    def communicate_header(self, a, peer: int, tag: int) -> None:
        hdr = torch.empty(_HEADER, dtype=torch.int64, device=self.device)
        for w in self.post([("recv", hdr, peer, tag)]):
            self.wait(w, f"the activation header for {to_str(a)}", peer, WAIT)
        h = hdr.tolist()
        parts, keys = [], []
        if h[0] in (0, 1, 2) and 1 <= h[1] <= _MAX_PARTS:
            for i in range(h[1]):
                p = h[2 + i * _PART:2 + (i + 1) * _PART]
                if not (0 <= p[0] < len(_DTYPES) and 0 <= p[1] <= _MAX_DIMS):
                    break
                parts.append((_DTYPES[p[0]], tuple(p[2:2 + p[1]])))
                keys.append(_key_text(p[2 + _MAX_DIMS:]))
        if not parts or len(parts) != h[1] or (not h[0] and len(parts) != 1):
            raise PipelineError(f"malformed activation header {h} from rank {peer}")
        self.meta[a.peer] = Layout(tuple(parts), bool(h[0]),
                                   tuple(keys) if h[0] == 2 else None)
        self.header_recvd.add(a.peer)

    def finish_recv(self, a, posted, contexts: dict) -> None:
        """Wait for a receive posted by :meth:`post_recv` and hand its message to the stage."""
        buf, work = posted
        self.wait(work, lambda: f"the {a.kind} of step {a.step} microbatch {a.mb} ({to_str(a)})",
                  self.stage_rank[a.peer], WAIT)
        ctx = contexts[a.stage]
        if buf.dtype == torch.uint8:  # a packed tuple/dict travels as bytes: unpack it
            peer, tag = self.stage_rank[a.peer], self._tag(a.peer, a.kind)
            buf = messages.unpack(buf, self._layout(a, ctx, peer, tag))
        ctx.in_msgs[(a.kind, a.step, a.mb)] = buf

    def drain_sends(self, keep: int = 0) -> None:
        """Release finished sends (their tensors), oldest first; wait for the oldest ones
        while more than ``keep`` batches of sends are outstanding."""
        q = self.send_works
        while q:
            works, _, peers = q[0]
            if len(q) > keep:
                for w in works:
                    self.wait(w, "a send", peers)
            elif not all(w is None or w.is_completed() for w in works):
                break
            q.pop(0)
