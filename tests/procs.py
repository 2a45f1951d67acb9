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


def rank_results(argv: list[str], outdir, deadline: float, nprocs: int = 2,
                 env: dict | None = None) -> list[dict]:
    """Launch ``argv`` on ``nprocs`` ranks (``asyncpp.pipeline.launch.run_ranks``) and read the
    ``rank{r}.json`` each writes into ``outdir``; a timeout, a missing file or a recorded crash
    fails the test with the rank's log tail or traceback."""
    import json

    import pytest

    from asyncpp.pipeline.launch import RankTimeout, log_tail, run_ranks

    try:
        run_ranks(argv, nprocs, outdir, deadline=deadline, **({"env": env} if env else {}))
    except RankTimeout as e:
        pytest.fail(str(e))
    results = []
    for r in range(nprocs):
        path = outdir / f"rank{r}.json"
        if not path.exists():
            pytest.fail(f"rank {r} wrote no result; its log ends with:\n{log_tail(outdir, r)}")
        res = json.loads(path.read_text())
        assert "crash" not in res, f"rank {r} crashed:\n{res['crash']}"
        results.append(res)
    return results
