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

    # steps long enough (~0.2 s of sleep each) that a loaded machine's jitter cannot make
    # the difference quotient of the two step counts negative
    r = bench_pipeline.main(["--stages", "2", "--m-factors", "1", "--steps", "1", "3",
                             "--repeats", "1", "--t-f", "0.02", "--t-b", "0.04",
                             "--schedules", "2bw", "1f1b"])
    run = r["runs"]["P2_m2"]
    assert run["ratio_2bw_over_1f1b"] > 0 and run["2bw"]["sim_makespan_N2"] > 0


def test_pipeline_refuses_a_steady_step_that_noise_made_negative(bench, monkeypatch):
    import bench_pipeline

    fake = {"t_comm": 1e-4, "t_f_measured": [0.002], "t_b_measured": [0.004],
            "cases": {f"{s}|2|{n}": [t] for s in ("2bw", "1f1b")
                      for n, t in ((1, 0.050), (2, 0.045))},  # T(2) < T(1): jitter
            "actions": {f"{s}|2": {"F": 0.002, "B": 0.004, "U": 0.0} for s in ("2bw", "1f1b")}}
    monkeypatch.setattr(bench_pipeline, "launch", lambda *a, **k: fake)
    with pytest.raises(RuntimeError, match="not positive, so timing noise exceeds 1 step"):
        bench_pipeline.main(["--stages", "2", "--m-factors", "1", "--steps", "1", "2",
                             "--repeats", "1", "--schedules", "2bw", "1f1b"])


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
    # and once with the bare loop's own math, so the loop's cost is told from the delay's
    plain = r["sections"]["train_cli_plain_tiny"]
    assert (plain["variant"], cli["variant"]) == ("plain", "2bw")
    assert plain["steady_tokens_per_s"] > 0 and plain["ratio_vs_bare_loop"] > 0


@pytest.mark.multiprocess
def test_async_cli(bench):
    import bench_async_cli

    r = bench_async_cli.main(["--model", "tiny", "--steps", "3", "--rounds", "1", "--batch", "4",
                              "--cases", "1f1b", "2bw", "--no-save"])
    assert r["2bw_over_1f1b"] > 0 and set(r["median"]) == {"1f1b", "2bw"}


@pytest.mark.multiprocess
def test_async_cli_against_the_zero_bubble_schedules(bench):
    """ZB-V runs two stages per rank through the CLI: 2P stages, untied, clipped per stage."""
    import bench_async_cli

    r = bench_async_cli.main(["--model", "tiny", "--steps", "3", "--rounds", "1", "--batch", "4",
                              "--layers", "4", "--untied", "--clip-scope", "stage",
                              "--cases", "zb-h1", "zb-v", "2bw", "--no-save"])
    assert set(r["median"]) == {"zb-h1", "zb-v", "2bw"}
    assert r["best_zero_bubble"] in ("zb-h1", "zb-v") and r["2bw_over_best_zero_bubble"] > 0


@pytest.mark.multiprocess
def test_peer_torch(bench):
    import peer_torch

    r = peer_torch.main(["--smoke"])
    cell = r["cells"]["mlp/m2"]["schedules"]
    refused = {k.split("/", 2)[2] for k in r["skipped"] if k.startswith("mlp/m2/")}
    assert refused == {"asyncpp:2bw@looped"}  # 4 stages of 2BW need m >= 3; the rest ran
    assert set(cell) | refused == set(r["params"]["names"])
    assert all(s["ratio_vs_torch_1f1b"]["median"] > 0 for s in cell.values())
    assert (bench / "peer_torch.json").exists()
    assert "| m | torch 1F1B step (ms) |" in peer_torch.render(r)
    assert peer_torch.ideal_ratio(2, 1.0, 0.0) == 1.5  # (m + P − 1) / m without an update


def test_at_scale(bench):
    import at_scale

    stage = {"t_f": 0.01, "t_b": 0.02, "t_bi": 0.012, "t_upd": 0.015, "t_msg": 0.0}
    (bench / "peer.json").write_text(json.dumps({"costs": {"demo": [stage, stage]},
                                                 "run": {"date": "test"}}))
    r = at_scale.main(["--costs", str(bench / "peer.json"), "--stages", "4",
                       "--m-factors", "1", "2"])
    rows = {(x["m"], x["schedule"]): x for x in r["rows"]}
    t, tu = 0.03, 0.015
    for m in (4, 8):  # 2BW over 1F1B: 1F1B's flush (P − 1)·t_mb, the update counted in both
        want = ((m + 3) * t + tu) / (m * t + tu)
        assert rows[(m, "2bw")]["throughput_vs_1f1b"] == pytest.approx(want, rel=1e-9)
        # interleaved (v = 2) halves the flush
        want = ((m + 3) * t + tu) / (m * t + 1.5 * t + tu)
        assert rows[(m, "interleaved-1f1b")]["throughput_vs_1f1b"] == pytest.approx(want)
    # ZB-V's published bubble, t_w = t_b − t_bi = 8 ms: ZB-H2's (P − 1)(T_F + T_B − 2T_W) with
    # T_F = 10 ms, T_B = t_bi = 12 ms, T_W = 8 ms, i.e. 3 × 6 ms
    assert rows[(8, "zb-v-formula")]["step_s"] == pytest.approx(8 * t + 3 * 0.006 + tu)
    for m in (4, 8):
        # the engine's ZB-H1, split at the measured t_w, is the published ZB-H1 exactly:
        # bubble (P − 1)(T_F + T_B − T_W) = 3 × 14 ms
        assert rows[(m, "zb-h1")]["step_s"] == pytest.approx(m * t + 3 * 0.014 + tu)
        # the engine's ZB-V: ahead of ZB-H1, never ahead of the published bubble
        assert rows[(m, "zb-h1")]["step_s"] > rows[(m, "zb-v")]["step_s"]
        assert rows[(m, "zb-h1")]["how"] == rows[(m, "zb-v")]["how"] == "simulated"
    assert rows[(8, "zb-v")]["step_s"] >= rows[(8, "zb-v-formula")]["step_s"] - 1e-12
    assert rows[(4, "2bw")]["weights"] == 2 and rows[(4, "1f1b")]["weights"] == 1
    assert not rows[(4, "zb-v-formula")]["modelled"] and rows[(8, "zb-v-formula")]["modelled"]
    assert rows[(4, "zb-v")]["modelled"]
    assert r["one_f_one_b_simulator_vs_formula"] < 1e-9
    assert (bench / "at_scale.json").exists()


def _script(bench, name, *args):
    import subprocess

    out = subprocess.run([sys.executable, str(BENCH / f"{name}.py"), *args],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stdout + out.stderr
    return out.stdout


@pytest.mark.multiprocess
def test_predict(bench):
    out = _script(bench, "bench_predict", "--m", "2", "--rounds", "1", "--steps", "3",
                  "--d", "16", "--layers", "2", "--rows", "4")
    r = json.loads((bench / "predict.json").read_text())
    assert {(c["schedule"], c["m"]) for c in r["cases"]} == {("1f1b", 2), ("2bw", 2)}
    # the runtime's own cost per action is measured (> 0) and lengthens the prediction
    assert all(c["costs_s"][k][3] > 0 for c in r["cases"] for k in (0, 1))
    assert all(c["predicted_s"] > c["predicted_work_s"] > 0 for c in r["cases"])
    assert "worst error with the runtime's per-action cost" in out


@pytest.mark.multiprocess
def test_colocated(bench):
    _script(bench, "bench_colocated", "--m", "4", "--rounds", "1", "--steps", "2", "--d", "16",
            "--layers", "4", "--rows", "4")
    r = json.loads((bench / "colocated.json").read_text())
    assert r["cases"]["wpipe P=4 (default, 2 per rank)|4"]["version_bytes_vs_2bw"] == 0.75


def test_soap_sides(bench):
    import bench_soap

    r = bench_soap.main(["--rounds", "1", "--periods", "1", "--set", "model.vocab_size=2048"])
    # the embedding's vocabulary side is longer than the ladder's limit, shorter than SOAP's
    assert [2048, 32] in [list(s) for s in r["matrix_shapes"]]
    assert r["ratio_default_over_ladder"] > 1.0
    assert (bench / "soap_sides.json").exists()
