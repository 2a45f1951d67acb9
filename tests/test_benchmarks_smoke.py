"""Smoke tests of the benchmark scripts: each main() runs with its smallest arguments, so the
scripts cannot rot. Figures are not checked here (see benchmarks/README.md); results go to a
temporary folder, never over the recorded ones."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parent.parent / "benchmarks"


@pytest.fixture
def bench(monkeypatch, tmp_path):
    monkeypatch.syspath_prepend(str(BENCH))
    monkeypatch.setenv("ASYNCPP_BENCH_RESULTS", str(tmp_path))
    return tmp_path


def test_muon(bench):
    import bench_muon

    r = bench_muon.main(["--layers", "1", "--div", "16", "--repeats", "1", "--device", "cpu"])
    assert r["matrices"] == 7 and r["ratio_torch_over_asyncpp"] > 0
    assert r["quality"]["fp32"]["sv_max"] < 1.5
    assert (bench / "muon_step_cpu.json").exists()


def test_delay(bench):
    import bench_delay

    r = bench_delay.main(["--layers", "1", "--div", "8", "--repeats", "1"])
    mem = r["memory"]
    assert mem["Delayed(Muon, 1)"]["measured_bytes"] == mem["Delayed(Muon, 1)"]["needed_bytes"]
    assert (mem["Delayed(Muon, 1) + EF"]["measured_bytes"]
            == mem["Delayed(Muon, 1) + EF"]["needed_bytes"])


@pytest.mark.multiprocess
def test_pipeline(bench):
    import bench_pipeline

    r = bench_pipeline.main(["--stages", "2", "--m-factors", "1", "--steps", "1", "2",
                             "--repeats", "1", "--t-f", "0.002", "--t-b", "0.004",
                             "--schedules", "2bw", "1f1b"])
    run = r["runs"]["P2_m2"]
    assert run["ratio_2bw_over_1f1b"] > 0 and run["2bw"]["sim_makespan_N2"] > 0


@pytest.mark.multiprocess
def test_memory(bench):
    import bench_memory

    r = bench_memory.main(["--stages", "2", "--microbatches", "2", "--dim", "16", "--steps",
                           "2", "--schedules", "2bw", "pipedream"])
    assert r["matches_schedule"]
    assert r["schedules"]["2bw"]["peak_versions"] == [2, 2]


def test_train(bench):
    import bench_train

    r = bench_train.main(["--model", "tiny", "--steps", "3", "--repeats", "1", "--batch", "2",
                          "--seq-len", "16"])
    assert r["ratio"] > 0


def test_wpipe(bench):
    import bench_wpipe

    r = bench_wpipe.main(["--devices", "2", "--m", "3"])
    assert r["wpipe_memory_vs_2bw"] == [0.75]


def test_gpu_dry_run(bench):
    sys.path.insert(0, str(BENCH / "gpu"))
    try:
        import run_gpu
    finally:
        sys.path.remove(str(BENCH / "gpu"))
    out = bench / "gpu.json"
    r = run_gpu.main(["--dry-run", "--device", "cpu", "--out", str(out)])
    assert not r["errors"], r["errors"]
    assert json.loads(out.read_text())["sections"]["backend"]["backend"] == "gloo"
    # The trainer-vs-bare-loop section ran through asyncpp-train's own loop.
    cli = r["sections"]["train_cli_tiny"]
    assert cli["steady_tokens_per_s"] > 0 and cli["ratio_vs_bare_loop"] > 0


@pytest.mark.multiprocess
def test_async_cli(bench):
    import bench_async_cli

    r = bench_async_cli.main(["--model", "tiny", "--steps", "3", "--rounds", "1", "--batch", "4",
                              "--cases", "1f1b", "2bw", "--no-save"])
    assert r["2bw_over_1f1b"] > 0 and set(r["median"]) == {"1f1b", "2bw"}
