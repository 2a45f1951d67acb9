"""Checkpoints: written atomically (temp file + fsync + rename), read with
``torch.load(weights_only=True)``, refused with a clear message when damaged.

A checkpoint is one file ``checkpoints/step-NNNNNNNN.pt`` holding a dict of tensors and plain
containers: ``format``, ``step``, ``config`` (the resolved config as a dict), ``model``,
``optimizers`` (one ``DelayedOptimizer.state_dict()`` per stage: wrapped optimizer state,
pending gradient queue, EF memory, step counter), ``sampler`` (data position), ``rng``. A
``torchrun`` launch writes that file as a manifest (its ``distributed`` layout) and one shard
per rank, ``step-NNNNNNNN.shards/rank-RRRRR.pt`` (:func:`shard_path`); either resumes in any
layout :mod:`asyncpp.train.layouts` allows.

Retention (``stale_checkpoints``): after writing step t, walking down from t, the newest
``keep`` *valid* (:func:`is_complete`) checkpoints at or below t are kept — step t first,
counted once however often it is written — and only checkpoints older than the oldest kept one
are deleted. A checkpoint above t (a damaged newer one skipped on resume) or a damaged one
between kept ones is never counted and never deleted, so retention cannot leave a run without a
loadable checkpoint.
Resuming reads the newest checkpoint that loads and passes its checksum
(:func:`load_newest_valid`); a damaged newer one is skipped with a note naming it and why, and
left on disk. Temporary files of a write that was killed (``.step-N.pt.*.tmp``) are removed
at the next start (:func:`remove_orphans`).
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import shutil
import tempfile
from pathlib import Path

import torch

from ..data.cache import atomic_write

FORMAT = "asyncpp-checkpoint-1"
_NAME = re.compile(r"^step-(\d{8})\.pt$")


def checkpoint_dir(run_dir: str | os.PathLike) -> Path:
    return Path(run_dir) / "checkpoints"


def list_checkpoints(run_dir: str | os.PathLike) -> list[tuple[int, Path]]:
    """``(step, path)`` of the run's checkpoints, oldest first."""
    d = checkpoint_dir(run_dir)
    if not d.is_dir():
        return []
    out = [(int(m.group(1)), d / f.name) for f in d.iterdir() if (m := _NAME.match(f.name))]
    return sorted(out)


def save_checkpoint(run_dir: str | os.PathLike, payload: dict, keep: int = 2,
                    is_valid=None) -> Path:
    """Write ``payload`` as the checkpoint of step ``payload['step']``, then delete what
    ``stale_checkpoints`` names (``is_valid(step, path)``: whether an older checkpoint
    can be resumed; default: it loads and passes its checksum). The previous checkpoints
    survive a crash during the write."""
    step = int(payload["step"])
    path = checkpoint_dir(run_dir) / f"step-{step:08d}.pt"
    body = {"format": FORMAT, **payload}
    body["digest"] = payload_digest(body)
    _atomic_save(path, body)
    for old in stale_checkpoints(run_dir, keep, written=step, is_valid=is_valid):
        old.unlink(missing_ok=True)
        # a torchrun checkpoint resumed in one process leaves its shards behind
        shutil.rmtree(shard_dir(run_dir, int(_NAME.match(old.name).group(1))),
                      ignore_errors=True)
    return path


def shard_dir(run_dir: str | os.PathLike, step: int) -> Path:
    """The folder of step ``step``'s per-rank shards (a torchrun checkpoint)."""
    return checkpoint_dir(run_dir) / f"step-{step:08d}.shards"


def shard_path(run_dir: str | os.PathLike, step: int, rank: int) -> Path:
    return shard_dir(run_dir, step) / f"rank-{rank:05d}.pt"


def load_shards(run_dir: str | os.PathLike, step: int, world: int) -> list[dict]:
    """Every rank's shard of the torchrun checkpoint of ``step`` (``world`` ranks), rank
    order; ``ValueError`` naming the first that is missing, damaged or of another step."""
    out = []
    for rank in range(int(world)):
        path = shard_path(run_dir, step, rank)
        if not path.is_file():
            raise ValueError(f"checkpoint of step {step} lacks the shard {str(path)!r}")
        shard = load_checkpoint(path)
        if int(shard.get("step", -1)) != step:
            raise ValueError(f"{str(path)!r} holds step {shard.get('step')}, not {step}")
        out.append(shard)
    return out


def save_shard(path: str | os.PathLike, payload: dict) -> Path:
    """Write one rank's checkpoint shard atomically, with the same ``format`` tag and checksum
    as a checkpoint (so :func:`load_checkpoint` refuses a damaged shard, too)."""
    body = {"format": FORMAT, **payload}
    body["digest"] = payload_digest(body)
    _atomic_save(Path(path), body)
    return Path(path)


def _atomic_save(path: Path, body: dict) -> None:
    """``torch.save`` through :func:`atomic_write`. A write error inside torch's zip writer
    surfaces as a ``RuntimeError`` chained to the ``OSError`` (e.g. a full disk); that
    ``OSError`` is raised instead, so callers see what the file system said."""
    try:
        atomic_write(path, lambda f: torch.save(body, f))
    except RuntimeError as e:
        cause = e.__cause__ or e.__context__
        while cause is not None and not isinstance(cause, OSError):
            cause = cause.__cause__ or cause.__context__
        if cause is None:
            raise
        raise cause from None


def stale_checkpoints(run_dir: str | os.PathLike, keep: int, written: int | None = None,
                      is_valid=None) -> list[Path]:
    """What :func:`save_checkpoint` deletes after writing step ``written`` (oldest first).

    Walking down from ``written`` (default: the newest step on disk), checkpoints are kept
    until ``keep`` valid ones are counted — ``written`` itself is valid, it was just written;
    an older one is valid if ``is_valid(step, path)`` (default: :func:`load_checkpoint` reads
    it). Stale are the checkpoints older than the oldest kept valid one, and none at all while
    fewer than ``keep`` valid ones exist. Steps above ``written`` are never stale."""
    if not isinstance(keep, int) or keep < 1:
        raise ValueError(f"keep must be a positive integer, got {keep!r}")
    found = list_checkpoints(run_dir)
    if not found:
        return []
    if written is None:
        written = found[-1][0]
    if is_valid is None:
        is_valid = is_complete
    below = [(s, p) for s, p in found if s <= written]
    counted = 0
    for i in range(len(below) - 1, -1, -1):
        step, path = below[i]
        if step == written or is_valid(step, path):
            counted += 1
            if counted == keep:
                return [p for _, p in below[:i]]
    return []


class ValidSteps:
    """``is_valid`` for ``stale_checkpoints`` that checks each step once: steps this
    process wrote or resumed from are added as valid (:meth:`add`); any other is checked
    with ``check(step, path)`` (default: it loads and passes its checksum) the first time."""

    def __init__(self, check=None) -> None:
        self.known: dict[int, bool] = {}
        self.check = check or is_complete

    def add(self, step: int) -> None:
        self.known[int(step)] = True

    def __call__(self, step: int, path: Path) -> bool:
        if step not in self.known:
            self.known[step] = bool(self.check(step, path))
        return self.known[step]


def is_complete(step: int, path: Path) -> bool:
    """Whether the checkpoint at ``path`` loads and passes its checksum, and — a torchrun
    manifest — so does the shard of every rank of the launch that wrote it."""
    try:
        ckpt = load_checkpoint(path)
        if "distributed" in ckpt:
            load_shards(path.parent.parent, step, ckpt["distributed"]["world_size"])
    except (ValueError, OSError, KeyError):
        return False
    return True


def remove_orphans(run_dir: str | os.PathLike) -> list[Path]:
    """Delete the temporary files that a write killed half-way left in the run's checkpoint
    folder and its shard folders (``.<name>.*.tmp``, see :func:`atomic_write`); returns them.
    Call only when no process of the run is writing (at its start)."""
    d = checkpoint_dir(run_dir)
    if not d.is_dir():
        return []
    gone = []
    for tmp in [*d.glob(".step-*.tmp"), *d.glob("step-*.shards/.rank-*.tmp")]:
        with contextlib.suppress(OSError):
            tmp.unlink()
            gone.append(tmp)
    return gone


def estimate_run_bytes(num_params: int, keep: int) -> int:
    r"""Disk space a run needs for its checkpoints, in bytes:
    :math:`4\,N\,(1 + 2 + 2)\,(k + 1) + 16\,\text{MiB}` for N float32 parameters (model,
    two optimizer moments, a pending delayed gradient and an EF buffer), the k kept
    checkpoints plus the one being written, and a margin for metrics and the tokenizer."""
    return 4 * int(num_params) * 5 * (int(keep) + 1) + (16 << 20)


def check_writable(run_dir: str | os.PathLike, need_bytes: int = 0) -> None:
    """``ValueError`` naming the path and the fix unless files can be created in ``run_dir``
    (or in its nearest existing ancestor) and its file system has ``need_bytes`` free.
    Creates nothing visible: the probe is an unnamed temporary file."""
    run_dir = Path(run_dir)
    existing = next(p for p in (run_dir, *run_dir.absolute().parents) if p.exists())
    if not existing.is_dir():
        raise ValueError(f"run.dir={str(run_dir)!r} is below {str(existing)!r}, which is a file, "
                         "not a folder; choose another --run.dir")
    try:
        with tempfile.TemporaryFile(dir=existing):
            pass
    except OSError as e:
        raise ValueError(f"cannot write to {str(existing)!r} (for run.dir={str(run_dir)!r}: "
                         f"{e.strerror or e}); choose a writable --run.dir") from None
    if need_bytes:
        free = shutil.disk_usage(existing).free
        if free < need_bytes:
            raise ValueError(f"only {free / 2**20:.1f} MiB free under {str(existing)!r} but the "
                             f"checkpoints of run.dir={str(run_dir)!r} need about "
                             f"{need_bytes / 2**20:.1f} MiB; free space, lower "
                             "train.keep_checkpoints, or choose another --run.dir")


def load_checkpoint(path: str | os.PathLike) -> dict:
    """Read a checkpoint safely (``weights_only=True``); ``ValueError`` if it is damaged or
    not an asyncpp checkpoint."""
    try:
        ckpt = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as e:
        raise ValueError(f"checkpoint {str(path)!r} cannot be read ({_load_fault(e)}); it is "
                         "truncated or corrupt") from None
    if not isinstance(ckpt, dict) or ckpt.get("format") != FORMAT:
        raise ValueError(f"{str(path)!r} is not an asyncpp checkpoint (format {FORMAT})")
    digest = ckpt.pop("digest", None)  # absent only in checkpoints older than the checksum
    if digest is not None and digest != payload_digest(ckpt):
        raise ValueError(f"checkpoint {str(path)!r} fails its checksum; it is truncated or "
                         "corrupt")
    return ckpt


def _load_fault(e: BaseException) -> str:
    """torch's load error in a few words: its first sentence, whole, without the advice on
    ``weights_only`` that follows a refused unpickling (a damaged byte looks like one)."""
    text = str(e).strip()
    if text.lower().startswith("weights only load failed"):
        detail = re.search(r"Unsupported [^\n]*\w", text)
        return "damaged pickled data" + (f": {detail.group(0)}" if detail else "")
    first = (text.splitlines() or [type(e).__name__])[0].strip()
    first = re.sub(r"^\[[^\]]*\]\s*\.?\s*", "", first)  # c10's "[enforce fail at f.cc:1] ."
    first = first.split(". ")[0].rstrip(". :,")
    if len(first) > 160:
        first = first[:160].rsplit(" ", 1)[0] + " …"
    return first or type(e).__name__


def load_newest_valid(run_dir: str | os.PathLike, accept=None) -> tuple[dict, list[str]]:
    """The newest checkpoint of ``run_dir`` that :func:`load_checkpoint` reads (and that
    ``accept(step, ckpt)`` does not refuse by raising ``ValueError``), with one note per newer
    checkpoint skipped: ``"skipped <file>: <why>; resuming from <file>"``. Nothing is deleted.
    ``ValueError`` naming every file and its fault if none is usable, or if there is none."""
    found = list_checkpoints(run_dir)
    if not found:
        raise ValueError(f"no checkpoint in {str(checkpoint_dir(run_dir))!r}")
    faults: list[tuple[Path, str]] = []
    for step, path in reversed(found):
        try:
            ckpt = load_checkpoint(path)
            if accept is not None:
                accept(step, ckpt)
        except ValueError as e:
            faults.append((path, str(e)))
            continue
        notes = [f"skipped {p.name}: {fault_text(why, p)}; resuming from {path.name}"
                 for p, why in faults]
        return ckpt, notes
    if len(faults) == 1:
        raise ValueError(faults[0][1])
    raise ValueError("no checkpoint can be resumed: " + "; ".join(
        f"{p.name}: {fault_text(why, p)}" for p, why in faults))


def fault_text(message: str, path: Path) -> str:
    """A fault message without the path it starts with (the note names the file)."""
    for lead in (f"checkpoint {str(path)!r} ", f"{str(path)!r} "):
        if message.startswith(lead):
            return message[len(lead):]
    return message


def newest_checkpoint_text(run_dir: str | os.PathLike) -> str:
    """``"the newest checkpoint is step-N.pt; free space or fix the cause, then continue with
    --resume --run.dir R"`` (or that there is none yet)."""
    found = list_checkpoints(run_dir)
    have = (f"the newest checkpoint is {found[-1][1].name}" if found
            else "no checkpoint was written yet")
    return f"{have}; fix the cause, then continue with --resume --run.dir {run_dir}"


def disk_error_text(e: OSError) -> str:
    """An ``OSError`` as ``"No space left on device"`` (its file named only when known)."""
    text = e.strerror or str(e) or type(e).__name__
    return f"{text}: {e.filename}" if e.filename else text


def payload_digest(obj) -> str:
    """sha256 over a checkpoint's structure and every tensor's dtype, shape and bytes, in
    order (``digest`` itself excluded): torch's zip reader does not verify its CRCs, so a
    flipped bit inside a tensor would otherwise load silently."""
    h = hashlib.sha256()

    def walk(o):
        if isinstance(o, torch.Tensor):
            t = o.detach().cpu().contiguous().reshape(-1)
            h.update(f"T{t.dtype}{tuple(o.shape)}".encode())
            h.update(t.view(torch.uint8).numpy().tobytes())
        elif isinstance(o, dict):
            h.update(b"{")
            for k, v in o.items():
                if k == "digest" and o is obj:
                    continue
                h.update(repr(k).encode())
                walk(v)
            h.update(b"}")
        elif isinstance(o, (list, tuple)):
            h.update(b"[" if isinstance(o, list) else b"(")
            for v in o:
                walk(v)
            h.update(b"]")
        else:
            h.update(f"{type(o).__name__}:{o!r};".encode())

    walk(obj)
    return h.hexdigest()


def rng_state() -> dict:
    """Torch CPU (and CUDA, if initialised) generator states."""
    out = {"torch": torch.get_rng_state()}
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        out["cuda"] = torch.cuda.get_rng_state_all()
    return out


def set_rng_state(state: dict) -> None:
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])
