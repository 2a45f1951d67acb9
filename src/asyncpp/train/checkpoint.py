"""Checkpoints: written atomically (temp file + fsync + rename), read with
``torch.load(weights_only=True)``, refused with a clear message when damaged.

A checkpoint is one file ``checkpoints/step-NNNNNNNN.pt`` holding a dict of tensors and plain
containers: ``format``, ``step``, ``config`` (the resolved config as a dict), ``model``,
``optimizers`` (one ``DelayedOptimizer.state_dict()`` per stage: wrapped optimizer state,
pending gradient queue, EF memory, step counter), ``sampler`` (data position), ``rng``.

Retention: after writing step t the newest ``keep`` distinct steps on disk are kept (step t
among them, counted once however often it is written). Resuming reads the newest checkpoint
that loads and passes its checksum (:func:`load_newest_valid`); a damaged newer one is skipped
with a note naming it and why, and left on disk.
"""

from __future__ import annotations

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


def save_checkpoint(run_dir: str | os.PathLike, payload: dict, keep: int = 2) -> Path:
    """Write ``payload`` as the checkpoint of step ``payload['step']`` and keep only the
    newest ``keep`` checkpoints. The previous checkpoints survive a crash during the write."""
    path = checkpoint_dir(run_dir) / f"step-{int(payload['step']):08d}.pt"
    body = {"format": FORMAT, **payload}
    body["digest"] = payload_digest(body)
    atomic_write(path, lambda f: torch.save(body, f))
    for old in stale_checkpoints(run_dir, keep):
        old.unlink(missing_ok=True)
    return path


def save_shard(path: str | os.PathLike, payload: dict) -> Path:
    """Write one rank's checkpoint shard atomically, with the same ``format`` tag and checksum
    as a checkpoint (so :func:`load_checkpoint` refuses a damaged shard, too)."""
    body = {"format": FORMAT, **payload}
    body["digest"] = payload_digest(body)
    atomic_write(Path(path), lambda f: torch.save(body, f))
    return Path(path)


def stale_checkpoints(run_dir: str | os.PathLike, keep: int) -> list[Path]:
    """The checkpoints beyond the newest ``keep`` distinct steps (oldest first): what
    :func:`save_checkpoint` deletes."""
    if not isinstance(keep, int) or keep < 1:
        raise ValueError(f"keep must be a positive integer, got {keep!r}")
    by_step: dict[int, Path] = dict(list_checkpoints(run_dir))
    steps = sorted(by_step)
    return [by_step[s] for s in steps[:max(len(steps) - keep, 0)]]


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
        first = (str(e).strip().splitlines() or [type(e).__name__])[0][:200]
        raise ValueError(f"checkpoint {str(path)!r} cannot be read ({first}); it is truncated or "
                         "corrupt") from None
    if not isinstance(ckpt, dict) or ckpt.get("format") != FORMAT:
        raise ValueError(f"{str(path)!r} is not an asyncpp checkpoint (format {FORMAT})")
    digest = ckpt.pop("digest", None)  # absent only in checkpoints older than the checksum
    if digest is not None and digest != payload_digest(ckpt):
        raise ValueError(f"checkpoint {str(path)!r} fails its checksum; it is truncated or "
                         "corrupt")
    return ckpt


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
