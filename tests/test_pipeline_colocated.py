"""Several stages per rank through the executor (``tests/colocated_worker.py``, 2 ranks, gloo,
float64, started the way torchrun starts ranks): WPipe's 4 partitions on 2 ranks equal the
delay core with WPipe's per-stage delays; looped 1F1B/GPipe (stage s on rank s mod 2) equal
synchronous training and looped 2BW the one-step delay; evaluation and resume work."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from procs import rank_results

WORKER = Path(__file__).with_name("colocated_worker.py")
TOL = 1e-12
pytestmark = pytest.mark.multiprocess


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    outdir = tmp_path_factory.mktemp("colocated")
    return rank_results([sys.executable, str(WORKER), "main", str(outdir)], outdir, deadline=240)


def _exact(run, check):
    for rank, res in enumerate(run):
        r = res[check]
        for field in ("params_next", "params_newest", "loss"):
            assert r[field] < TOL, (rank, check, field, r[field])
        assert r["steps"] == 10
        # the match is not vacuous: a schedule with other delays ends elsewhere
        assert r["control"] > 1e-3, (rank, check)


@pytest.mark.parametrize("check", [f"wpipe_{n}_m{m}" for n in ("adamw", "muon_ef",
                                                                "adamw_taylor")
                                   for m in (3, 4)])
def test_colocated_wpipe_equals_the_delay_core(run, check):
    """Rank d runs partitions d and 2 + d; delays (1, 1, 0, 0); G0 partitions hold at most two
    versions, G1 partitions one (1.5 partition-versions per rank against 2BW's 2)."""
    _exact(run, check)
    for rank, res in enumerate(run):
        r = res[check]
        assert r["delays"] in ([1, 1, 0, 0], [1, 1, 1, 1, 0, 0, 0, 0])
        assert r["placement"] == [[0, 2], [1, 3]]
        assert {int(s): len(v) for s, v in r["versions"].items()} == \
            {rank: 2, 2 + rank: 1}


@pytest.mark.parametrize("check", ["looped_1f1b_adamw_none", "looped_1f1b_muon_none",
                                   "looped_2bw_muon_ef", "looped_gpipe_adamw_none"])
def test_looped_schedules_equal_their_single_process_runs(run, check):
    _exact(run, check)


def test_colocated_evaluate_and_resume(run):
    for res in run:
        r = res["wpipe_evaluate_resume"]
        assert r["evaluate"] < TOL
        assert r["resume_losses_equal"] and r["resume_weights_equal"]


def test_interleaving_adapts_to_a_slow_stage_and_stays_exact(run):
    """A slow last partition: rank 0 departs from the merged program's interleaving (a fixed
    order would wait), each stage keeps its own order, and the weights are the delay core's."""
    r0, r1 = (res["wpipe_interleaving_adapts"] for res in run)
    for r in (r0, r1):
        assert r["params_next"] < TOL and r["params_newest"] < TOL and r["loss"] < TOL
        assert r["same_per_stage"], r
    assert r0["order_differs"], r0
