"""pytest configuration of ``verify/``: hypothesis profiles and the JSON report writer.

* Profiles: see :mod:`verify.profiles` (``HYPOTHESIS_PROFILE`` = ``ci`` | ``dev`` | ``thorough``;
  default ``ci`` when ``CI`` is set, ``dev`` otherwise).
* Report: at the end of the session the records of every property, the mutant outcomes and the
  test outcomes are written to ``$ASYNCPP_VERIFY_REPORT``, or by default to
  ``<rootdir>/<cache_dir>/asyncpp-verify-report.json`` (``.pytest_cache/`` unless pytest's
  ``cache_dir`` says otherwise). Schema: ``verify/README.md``.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest
import torch

from verify import profiles
from verify.report import DEFAULT_NAME, ENV_PATH, REPORT

PROFILE = profiles.load()
_T0 = time.time()


def report_path(config: pytest.Config) -> Path:
    """``$ASYNCPP_VERIFY_REPORT`` or ``<rootdir>/<cache_dir>/asyncpp-verify-report.json``."""
    env = os.environ.get(ENV_PATH)
    if env:
        return Path(env)
    try:
        cache_dir = config.getini("cache_dir") or ".pytest_cache"
    except ValueError:  # cacheprovider disabled
        cache_dir = ".pytest_cache"
    return Path(config.rootpath) / cache_dir / DEFAULT_NAME


@pytest.fixture(autouse=True)
def _single_thread():
    """The properties run many tiny float64 ops; torch's intra-op threads only add overhead on
    them (and contend on shared CI cores), so verify/ tests run single-threaded."""
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


def pytest_report_header(config: pytest.Config) -> str:
    return f"asyncpp verify: hypothesis profile {PROFILE!r}, report -> {report_path(config)}"


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if "verify/" not in report.nodeid.replace("\\", "/"):
        return
    if report.when == "call" or report.outcome != "passed":
        REPORT.outcomes[report.nodeid] = report.outcome


def mutant_table() -> list[str]:
    """The mutant table as text lines: per mutant, the properties that catch it (theory-side
    ones marked ``*``)."""
    from verify.test_mutants import SIDE

    lines = []
    for mutant, checks in sorted(REPORT.mutants.items()):
        caught = [p + ("*" if SIDE.get(p) == "theory" else "") for p, v in checks.items()
                  if v["caught"]]
        missed = [p for p, v in checks.items() if not v["caught"]]
        lines.append(f"  {mutant:32s} caught by {len(caught):2d}: {', '.join(caught) or '-'}"
                     f"   (missed by: {', '.join(missed) or '-'})")
    return lines


def pytest_terminal_summary(terminalreporter, exitstatus, config) -> None:
    if not REPORT.mutants:
        return
    terminalreporter.section("asyncpp mutant table (* = theory-side property)")
    for line in mutant_table():
        terminalreporter.write_line(line)


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    if not REPORT.records and not REPORT.mutants and not REPORT.outcomes:
        return
    path = REPORT.write(report_path(session.config), PROFILE, time.time() - _T0)
    tr = session.config.pluginmanager.get_plugin("terminalreporter")
    if tr is not None:
        tr.write_line(f"asyncpp verify report written to {path}")
