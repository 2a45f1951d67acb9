"""Processes of a real ``torchrun`` launch, for the multi-process tests."""

from __future__ import annotations

from pathlib import Path


def workers_of(parent: int) -> dict[int, int]:
    """{RANK: pid} of the worker processes torchrun (pid ``parent``) started (read from
    /proc: each child's parent pid and its RANK environment variable)."""
    out = {}
    for p in Path("/proc").iterdir():
        if not p.name.isdigit():
            continue
        try:
            ppid = int((p / "stat").read_text().rsplit(")", 1)[1].split()[1])
            if ppid != parent:
                continue
            env = dict(kv.split("=", 1) for kv in
                       (p / "environ").read_bytes().decode(errors="replace").split("\0")
                       if "=" in kv)
            out[int(env["RANK"])] = int(p.name)
        except (OSError, KeyError, ValueError, IndexError):
            continue
    return out
