"""Where each stage's time goes, and every rank's memory, in ``summary.json`` and the closing
lines.

The clock (:mod:`asyncpp.pipeline.runtime.stage_clock`) against a plain interpreter of the
same sections on a fake time source (hypothesis); the executor on 2 gloo ranks
(``tests/stage_times_worker.py``): a stage made slower leaves its neighbour idle, two stages
per rank share the rank's time; then real 2-rank launches of the CLI, 1F1B and 2BW at the
same m: every stage and rank reported, busy + comm + idle equal to the wall time, the wall
time equal to the trainer's own step times, and 1F1B's flush bubble (which 2BW does not have)
visible as more idle time; and the one-process run's single entry.
"""

from __future__ import annotations

import json
import os
import re
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from procs import rank_results
from stage_times_worker import SLEEP_S, STEPS
from stage_times_worker import M as WORKER_M

from asyncpp.pipeline import build, simulate, steady_state_bubble
from asyncpp.pipeline.launch import RankTimeout, run_ranks
from asyncpp.pipeline.runtime.stage_clock import BUSY, COMM, REST, WAIT, StageClock
from asyncpp.train import cli

# -- the clock ------------------------------------------------------------------------------


class FakeTime:
    def __init__(self) -> None:
        self.now = 0.0

    def perf_counter(self) -> float:
        return self.now


def _ops(num_stages: int):
    """A random section program: opens (kind or None, stage or None), closes, time passing
    (multiples of 1/8 s: sums stay exact in float64), completed steps."""
    stage = st.one_of(st.none(), st.integers(0, num_stages - 1))
    kind = st.sampled_from([BUSY, COMM, WAIT, None])
    return st.lists(st.one_of(st.tuples(st.just("push"), kind, stage),
                              st.tuples(st.just("pop")),
                              st.tuples(st.just("advance"), st.integers(0, 16)),
                              st.tuples(st.just("step"))), max_size=60)


def _interpret(ops, warmup: int):
    """Each interval's seconds to the innermost open section's (kind, stage), inheriting an
    unset kind or stage from the enclosing section; the warm-up's share subtracted when steps
    beyond it completed."""
    stack, acc, steps, warm = [], {}, 0, None
    for op in ops:
        if op[0] == "push":
            top = stack[-1] if stack else (REST, None)
            stack.append((op[1] or top[0], top[1] if op[2] is None else op[2]))
        elif op[0] == "pop":
            if stack:
                stack.pop()
        elif op[0] == "advance":
            key = stack[-1] if stack else (REST, None)
            acc[key] = acc.get(key, 0.0) + op[1] / 8
        else:
            steps += 1
            if steps == warmup:
                warm = dict(acc)
    excluded = warm is not None and steps > warmup
    warm = warm if excluded else {}
    skipped = warmup if excluded else 0
    return {k: v - warm.get(k, 0.0) for k, v in acc.items()}, steps - skipped, skipped


@settings(max_examples=300, deadline=None)
@given(data=st.data(), num_stages=st.integers(1, 3), warmup=st.integers(0, 2))
def test_the_clock_charges_every_interval_to_the_innermost_section(data, num_stages, warmup):
    ops = data.draw(_ops(num_stages))
    fake = FakeTime()
    clock = StageClock(range(num_stages), warmup_steps=warmup, now=fake.perf_counter)
    clock.start()
    for op in ops:
        if op[0] == "push":
            clock.push(op[1], op[2])
        elif op[0] == "pop":
            clock.pop()
        elif op[0] == "advance":
            fake.now += op[1] / 8
        else:
            clock.step_done()
    want, measured, skipped = _interpret(ops, warmup)
    wall = sum(want.values())
    stages = list(range(num_stages))
    for t in clock.report():
        s = t.stage

        def own(kind, s=s):  # one stage per rank: time outside any stage is the stage's
            return want.get((kind, s), 0.0) + (want.get((kind, None), 0.0)
                                               if num_stages == 1 else 0.0)

        other = sum(want.get((k, u), 0.0) for k in (BUSY, COMM) for u in stages if u != s)
        assert (t.steps, t.warmup_steps, t.wall_s, t.busy_s, t.comm_s, t.wait_s, t.other_s) \
            == (measured, skipped, wall, own(BUSY), own(COMM), own(WAIT), other)
        assert t.busy_s + t.comm_s + t.idle_s + t.other_s == pytest.approx(wall, abs=1e-12)
        assert t.idle_s >= t.wait_s - 1e-12
        d = t.to_dict()
        if wall > 0 and num_stages == 1:
            assert d["busy_share"] + d["comm_share"] + d["idle_share"] \
                == pytest.approx(1.0, abs=1e-12)


def test_the_clock_counts_only_while_running_and_excludes_the_warm_up():
    fake = FakeTime()
    clock = StageClock([3], now=fake.perf_counter)
    clock.push(COMM)  # a wait outside run_steps (evaluation, checkpoint): not a step's time
    fake.now += 5.0
    clock.pop()
    clock.start()
    clock.push(BUSY, 3)
    fake.now += 2.0  # step 1: warm-up
    clock.pop()
    clock.step_done()
    fake.now += 0.5  # the caller's time between steps
    clock.push(BUSY, 3)
    fake.now += 1.0
    clock.push(WAIT)  # nested: the stage's own wait
    fake.now += 0.25
    clock.pop()
    clock.pop()
    clock.step_done()
    clock.stop()
    fake.now += 7.0  # stopped: nothing is charged
    (t,) = clock.report()
    assert (t.stage, t.steps, t.warmup_steps) == (3, 1, 1)
    assert (t.wall_s, t.busy_s, t.comm_s, t.wait_s, t.idle_s) == (1.75, 1.0, 0.0, 0.25, 0.75)
    assert StageClock([0]).report()[0].steps == 0  # nothing run: an empty window


# -- the executor -------------------------------------------------------------------------------

WORKER = Path(__file__).with_name("stage_times_worker.py")


def _env(cache: Path) -> dict:
    src = str(Path(__file__).resolve().parents[1] / "src")
    return dict(os.environ, OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1", ASYNCPP_CACHE=str(cache),
                PYTHONPATH=src + os.pathsep + os.environ.get("PYTHONPATH", ""))


@pytest.fixture(scope="module")
def executor_runs(tmp_path_factory):
    outdir = tmp_path_factory.mktemp("stage_times_executor")
    return rank_results([sys.executable, str(WORKER), str(outdir)], outdir, deadline=120,
                        env=_env(outdir / "cache"))


@pytest.mark.multiprocess
def test_a_slower_stage_leaves_its_neighbour_idle(executor_runs):
    """The last stage sleeps in every forward; the first has almost nothing to compute. The
    simulator with those costs predicts the idle shares; the measured difference is at least
    a quarter of the predicted one (on a loaded machine the first stage is not always
    scheduled at once when a gradient arrives, which leaves the last stage waiting too)."""
    sim = simulate(build("2bw", 2, WORKER_M, STEPS), t_forward=[0.0, SLEEP_S], t_backward=0.0)
    predicted = sim.utilisation[1] - sim.utilisation[0]
    assert predicted > 0.9
    (first,), (last,) = executor_runs[0]["slow"], executor_runs[1]["slow"]
    assert (first["stage"], last["stage"], first["steps"]) == (0, 1, STEPS - 1)
    assert first["idle_share"] - last["idle_share"] >= predicted / 4, (first, last)
    assert first["wait_s"] >= 0.5 * first["idle_s"]  # the idle time is spent on receives


@pytest.mark.multiprocess
def test_two_stages_per_rank_share_the_rank_time(executor_runs):
    for rank, res in enumerate(executor_runs):
        a, b = res["looped"]
        assert (a["stage"], b["stage"]) == (rank, rank + 2)
        assert a["wall_s"] == b["wall_s"] > 0
        for me, other in ((a, b), (b, a)):
            assert me["steps"] == STEPS - 1 and me["busy_s"] > 0
            assert me["other_s"] == pytest.approx(other["busy_s"] + other["comm_s"], rel=1e-12)
            assert me["busy_s"] + me["comm_s"] + me["other_s"] + me["idle_s"] \
                == pytest.approx(me["wall_s"], rel=1e-12)
            assert me["idle_s"] >= me["wait_s"] >= 0


# -- real runs ----------------------------------------------------------------------------------

ARGS = ["--model.name", "tiny", "--model.dim", "128", "--model.ffn_dim", "512",
        "--data.max_documents", "60", "--data.seq_len", "64", "--train.steps", "8",
        "--train.batch_size", "8", "--pipeline.microbatches", "2", "--pipeline.stages", "2",
        "--train.eval_every", "0", "--train.checkpoint_every", "0", "--train.eval_batches", "1",
        "--run.threads", "1", "--log.progress", "false", "--log.plot", "false",
        "--log.tensorboard", "off"]
M, P, T = 2, 2, 8
LINE = re.compile(r"^stage (\d) \(rank (\d)\): busy [\d.]+ %, comm [\d.]+ %, idle [\d.]+ % "
                  r"\(waiting for a peer [\d.]+ %\) of [\d.]+ s over steps 2-8; "
                  r"peak memory [\d,]+ MB$")


@pytest.fixture(scope="module")
def launches(tmp_path_factory):
    root = tmp_path_factory.mktemp("stage_times")
    out = {}
    for schedule in ("1f1b", "2bw"):
        run = root / schedule
        logs = root / f"logs-{schedule}"
        try:
            codes = run_ranks([sys.executable, "-m", "asyncpp.train.cli", *ARGS,
                               "--pipeline.schedule", schedule, "--run.dir", str(run)], 2, logs,
                              deadline=180, env=_env(root / "cache"), log_name="rank{rank}.log")
        except RankTimeout as e:
            pytest.fail(str(e))
        texts = [(logs / f"rank{r}.log").read_text() for r in range(2)]
        for r, (rc, text) in enumerate(zip(codes, texts)):
            assert rc == 0, f"{schedule} rank {r} failed:\n{text[-3000:]}"
        metrics = [json.loads(ln) for ln in (run / "metrics.jsonl").read_text().splitlines()]
        out[schedule] = (json.loads((run / "summary.json").read_text()), metrics, texts)
    return out


@pytest.mark.multiprocess
@pytest.mark.parametrize("schedule", ["1f1b", "2bw"])
def test_every_stage_and_rank_is_reported_and_adds_up(launches, schedule):
    summary, metrics, texts = launches[schedule]
    stages = summary["stage_times"]
    assert summary["stages"] == P  # the layout's count, as before
    assert [(e["stage"], e["rank"], e["dp_rank"]) for e in stages] == [(0, 0, 0), (1, 1, 0)]
    # the trainer's own clock: the steps after the first, on rank 0 (where they are timed)
    trainer_s = sum(r["step_time_s"] for r in metrics[1:])
    slowest = max(r["step_time_s"] for r in metrics)
    for e in stages:
        assert (e["steps"], e["warmup_steps"]) == (T - 1, 1)
        # exact by construction (every interval charged once): float rounding only
        assert e["busy_s"] + e["comm_s"] + e["idle_s"] == pytest.approx(e["wall_s"], rel=1e-9)
        assert min(e["busy_s"], e["comm_s"], e["wait_s"]) > 0 and e["other_s"] == 0
        assert e["wait_s"] <= e["idle_s"]
        assert e["busy_share"] + e["comm_share"] + e["idle_share"] == pytest.approx(1, abs=1e-9)
        # independent of the clock: the window of a rank spans the trainer's measured steps,
        # shifted by at most one step (the last stage completes a step before the first)
        assert abs(e["wall_s"] - trainer_s) <= 0.05 * trainer_s + slowest, (e, trainer_s)
    ranks = summary["ranks"]
    assert [(r["rank"], r["stages"], r["device"]) for r in ranks] == [(0, [0], "cpu"),
                                                                      (1, [1], "cpu")]
    # a process that imported torch and trained holds more than 100 MB resident
    assert all(100 < r["peak_mem_mb"] < 8192 for r in ranks)
    assert summary["peak_mem_mb"] == max(r["peak_mem_mb"] for r in ranks)
    lines = [m.groups() for ln in texts[0].splitlines() if (m := LINE.match(ln))]
    assert lines == [("0", "0"), ("1", "1")], texts[0][-2000:]
    assert not any(LINE.match(ln) for ln in texts[1].splitlines())  # rank 0 prints them


@pytest.mark.multiprocess
def test_the_flush_bubble_of_1f1b_shows_as_idle_time(launches):
    """1F1B drains the pipeline every step, so even its busiest stage idles (P − 1) of every
    m + P − 1 microbatch slots; 2BW streams, and only a stage faster than its neighbour waits
    (an imbalance the machine's load varies, not a bubble of the schedule). So the least idle
    stage of each run is compared: 1F1B's idles more, by at least a quarter of the
    simulator's steady-state difference (the rest is overhead the two share and 2BW's fill
    and drain inside the 7 measured steps)."""
    predicted = steady_state_bubble("1f1b", P, M) - steady_state_bubble("2bw", P, M)
    assert predicted == pytest.approx(1 / 3)

    def least_idle(schedule):
        return min(e["idle_share"] for e in launches[schedule][0]["stage_times"])

    assert least_idle("1f1b") - least_idle("2bw") >= predicted / 4, \
        (least_idle("1f1b"), least_idle("2bw"))


def test_one_process_reports_one_entry_without_communication(tmp_path, capsys):
    run = tmp_path / "run"
    argv = [*ARGS, "--train.steps", "4", "--pipeline.schedule", "2bw", "--simulate",
            "--data.cache_dir", str(tmp_path / "cache"), "--run.dir", str(run)]
    assert cli.main(argv) == 0
    out = capsys.readouterr().out
    summary = json.loads((run / "summary.json").read_text())
    (e,) = summary["stage_times"]
    assert (e["stage"], e["rank"], e["steps"], e["warmup_steps"]) == (None, 0, 3, 1)
    assert e["comm_s"] == e["wait_s"] == 0 and e["busy_s"] > 0
    assert e["busy_s"] + e["idle_s"] == pytest.approx(e["wall_s"], rel=1e-9)
    (r,) = summary["ranks"]
    assert (r["rank"], r["stages"]) == (0, [0, 1]) and r["peak_mem_mb"] > 100
    assert re.search(r"^one process \(all stages\): busy [\d.]+ %, idle [\d.]+ % of [\d.]+ s "
                     r"over steps 2-4; peak memory [\d,]+ MB$", out, re.M), out
