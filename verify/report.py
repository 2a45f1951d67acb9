"""The machine-readable report of a ``pytest verify/`` run (schema in ``verify/README.md``).

Each property check returns a :class:`Record` (what was measured, the bound, their ratio, the
instance parameters); the hypothesis-driven tests hand every record to :data:`REPORT`, the
mutation tests hand their outcomes to it, and ``verify/conftest.py`` writes it as JSON at the
end of the session to ``$ASYNCPP_VERIFY_REPORT`` (default
``.pytest_cache/asyncpp-verify-report.json``).
"""

from __future__ import annotations

import json
import math
import os
import platform
import statistics
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

SCHEMA = "asyncpp-verify-report/1"
ENV_PATH = "ASYNCPP_VERIFY_REPORT"
DEFAULT_NAME = "asyncpp-verify-report.json"


def _clean(x):
    """JSON-safe copy: non-finite floats become strings, tuples lists, tensors floats."""
    if isinstance(x, dict):
        return {str(k): _clean(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_clean(v) for v in x]
    if hasattr(x, "item") and callable(x.item) and getattr(x, "ndim", 1) == 0:
        x = x.item()
    if isinstance(x, bool) or x is None or isinstance(x, (int, str)):
        return x
    if isinstance(x, float):
        return x if math.isfinite(x) else str(x)
    return str(x)


@dataclass
class Record:
    """One checked instance of one property.

    ``kind`` says how ``measured`` and ``bound`` compare: ``"upper"`` — the property is
    measured ≤ bound (ratio = measured/bound ≤ 1); ``"lower"`` — the property is
    ratio = measured/bound ≥ ``threshold`` (a documented constant, e.g. 1/4 for a tightness
    instance, 1 for a lower bound); ``"classify"`` — a yes/no prediction (ratio = 1 if right,
    ``measured``/``bound`` then hold the measured and predicted rates).
    """

    prop: str
    kind: str
    measured: float
    bound: float
    passed: bool
    params: dict = field(default_factory=dict)
    extra: dict = field(default_factory=dict)
    threshold: float | None = None

    @property
    def ratio(self) -> float:
        if self.kind == "classify":
            return 1.0 if self.passed else 0.0
        if self.bound == 0:
            return 0.0 if self.measured == 0 else math.inf
        return self.measured / self.bound

    def as_json(self) -> dict:
        d = asdict(self)
        d["ratio"] = self.ratio
        return _clean(d)


@dataclass
class Report:
    """Collects records and mutant outcomes for one session."""

    records: dict[str, list[Record]] = field(default_factory=dict)
    descriptions: dict[str, str] = field(default_factory=dict)
    mutants: dict[str, dict[str, dict]] = field(default_factory=dict)
    outcomes: dict[str, str] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    started: float = field(default_factory=time.time)
    enabled: bool = True

    def describe(self, prop: str, text: str) -> None:
        self.descriptions.setdefault(prop, text)

    def add(self, rec: Record) -> Record:
        if self.enabled:
            self.records.setdefault(rec.prop, []).append(rec)
        return rec

    def mutant(self, mutant: str, prop: str, caught: bool, message: str = "") -> None:
        self.mutants.setdefault(mutant, {})[prop] = {"caught": caught, "message": message[:500]}

    def summary(self, prop: str) -> dict:
        recs = self.records.get(prop, [])
        ratios = [r.ratio for r in recs if math.isfinite(r.ratio)]
        out = {"n": len(recs), "failures": sum(not r.passed for r in recs),
               "kind": recs[0].kind if recs else None,
               "threshold": recs[0].threshold if recs else None}
        if ratios:
            out.update(min_ratio=min(ratios), median_ratio=statistics.median(ratios),
                       max_ratio=max(ratios))
        return out

    def as_json(self, profile: str, duration_s: float | None = None) -> dict:
        import torch

        return _clean({
            "schema": SCHEMA,
            "created_unix": time.time(),
            "duration_s": duration_s if duration_s is not None else time.time() - self.started,
            "profile": profile,
            "environment": {"python": platform.python_version(), "torch": torch.__version__},
            "properties": {
                p: {"description": self.descriptions.get(p, ""), "summary": self.summary(p),
                    "records": [r.as_json() for r in recs]}
                for p, recs in sorted(self.records.items())
            },
            "mutants": {
                m: {"caught_by": sorted(p for p, v in d.items() if v["caught"]), "checks": d}
                for m, d in sorted(self.mutants.items())
            },
            "tests": dict(sorted(self.outcomes.items())),
            "notes": self.notes,
        })

    def write(self, path: Path, profile: str, duration_s: float | None = None) -> Path:
        """Write atomically (temp file + rename)."""
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        data = self.as_json(profile, duration_s)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name, suffix=".tmp")
        with os.fdopen(fd, "w") as fh:
            json.dump(data, fh, indent=1)
        os.replace(tmp, path)
        return path


REPORT = Report()
