"""Where derived data lives (trained tokenizers, token arrays) and how it is written safely."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import tempfile
from collections.abc import Callable
from pathlib import Path


def cache_dir(override: str | os.PathLike | None = None) -> Path:
    """The cache root: ``override``, else ``$ASYNCPP_CACHE``, else ``$XDG_CACHE_HOME/asyncpp``,
    else ``~/.cache/asyncpp``."""
    if override:
        return Path(override).expanduser()
    env = os.environ.get("ASYNCPP_CACHE")
    if env:
        return Path(env).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME")
    base = Path(xdg).expanduser() if xdg else Path.home() / ".cache"
    return base / "asyncpp"


def fingerprint(obj) -> str:
    """sha256 (hex, 20 chars) of a JSON-serialisable description."""
    return hashlib.sha256(json.dumps(obj, sort_keys=True).encode()).hexdigest()[:20]


def file_digest(path: str | os.PathLike, chunk: int = 1 << 20) -> str:
    """sha256 (hex) of a file's bytes."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(chunk):
            h.update(block)
    return h.hexdigest()


def current_umask() -> int:
    """The process's umask (read by setting it and restoring it at once)."""
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def atomic_write(path: str | os.PathLike, write: Callable) -> Path:
    """Create ``path`` atomically: ``write(fileobj)`` into a temporary file in the same folder,
    flush + fsync, then ``os.replace`` (readers see the old file or the complete new one).
    The file gets the mode a plain ``open`` would give it (0666 less the umask): the temporary
    file is private (0600) only while it is being written."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        os.fchmod(fd, 0o666 & ~current_umask())
        with os.fdopen(fd, "wb") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    with contextlib.suppress(OSError):
        dfd = os.open(path.parent, os.O_RDONLY)
        try:
            os.fsync(dfd)
        finally:
            os.close(dfd)
    return path

