"""WPipe measured from its schedule data against PipeDream-2BW and 1F1B on the same devices
(``asyncpp.pipeline.simulator.simulate_devices``): per-partition delays and weight versions,
bubble fraction and weight-version memory per device."""

from __future__ import annotations

import statistics

import pytest

from asyncpp.pipeline import build
from asyncpp.pipeline.simulator import (
    default_devices,
    simulate,
    simulate_devices,
    steady_state_bubble,
    steady_state_devices,
)


def _same_model(name, D, m, steps=4):
    """D devices, one model: 2BW/1F1B D stages (t_f 1, t_b 2), WPipe 2D partitions of half
    the work each."""
    if name == "wpipe":
        return simulate_devices(build(name, 2 * D, m, steps), None, 0.5, 1.0)
    return simulate_devices(build(name, D, m, steps), None, 1.0, 2.0)


@pytest.mark.parametrize("D", [1, 2, 3, 4])
def test_delays_versions_and_pairing(D):
    P = 2 * D
    s = build("wpipe", P, P - 1, 3)
    assert s.delays() == [frozenset({1})] * D + [frozenset({0})] * D
    assert s.versions_held() == [2] * D + [1] * D
    # mean delay over the weights (equal partitions): half of 2BW's
    assert statistics.mean(min(d) for d in s.delays()) == 0.5
    assert default_devices(s) == [[d, D + d] for d in range(D)]
    with pytest.raises(ValueError, match="even number of stages"):
        build("wpipe", P + 1, P, 1)
    if P > 2:
        with pytest.raises(ValueError, match=f"needs num_microbatches >= {P - 1}"):
            build("wpipe", P, P - 2, 1)
        # and the refusal is needed: with m = P − 2 the data itself is inconsistent (G0's
        # first partition would forward on a version not yet produced)
        from asyncpp.pipeline.schedules import Schedule, check, stage_actions

        acts = tuple(tuple(stage_actions("wpipe", P, P - 2, k, 0, 4)) for k in range(P))
        with pytest.raises(ValueError, match="before it exists"):
            check(Schedule("wpipe", P, P - 2, 4, 0, acts, (0,) * P))


@pytest.mark.parametrize("D", [2, 4])
@pytest.mark.parametrize("mult", [1, 2])
def test_weight_memory_per_device_is_three_quarters_of_2bw(D, mult):
    m = 2 * D * mult - (1 if mult == 1 else 0)  # WPipe's minimum 2D − 1, and 4D
    mem = {n: max(_same_model(n, D, m).weight_memory) for n in ("1f1b", "2bw", "wpipe")}
    assert mem["1f1b"] == pytest.approx(1 / D)            # one version of its share
    assert mem["2bw"] == pytest.approx(2 / D)             # two versions
    assert mem["wpipe"] == pytest.approx(1.5 / D)         # G0 two versions, G1 one
    assert mem["wpipe"] / mem["2bw"] == pytest.approx(0.75)
    # every device, not just the worst
    assert _same_model("wpipe", D, m).weight_memory == pytest.approx((1.5 / D,) * D)


@pytest.mark.parametrize("D,m,want", [(2, 3, 0.0), (2, 4, 0.0), (2, 8, 0.0),
                                      (4, 7, 1 / 15), (4, 8, 1 / 17), (4, 16, 1 / 33)])
def test_bubble_per_device_against_2bw_and_1f1b(D, m, want):
    """2BW has none; 1F1B (D−1)/(m+D−1); WPipe none at 2 devices and a small one at 4 (our
    greedy device order: one device-slot of t_f + t_b idle per step and device pair)."""
    wp, _ = steady_state_devices("wpipe", 2 * D, m, 0.5, 1.0)
    bw, _ = steady_state_devices("2bw", D, m, 1.0, 2.0)
    fb, _ = steady_state_devices("1f1b", D, m, 1.0, 2.0)
    assert bw == pytest.approx(0.0, abs=1e-12)
    assert fb == pytest.approx((D - 1) / (m + D - 1))
    assert wp == pytest.approx(want, abs=1e-9)
    assert wp < fb
    # without the pairing (each partition alone on a device) G1's drain is idle time
    assert steady_state_bubble("wpipe", 2 * D, m, 0.5, 1.0) > wp + 0.05


def test_devices_run_one_action_at_a_time_and_match_simulate_for_one_stage_each():
    s = build("wpipe", 4, 3, 3)
    res = simulate_devices(s, None, 0.5, 1.0)
    for stages in res.devices:
        ivs = sorted((iv.start, iv.end) for iv in res.intervals if iv.stage in stages)
        assert all(a_end <= b_start + 1e-12 for (_, a_end), (b_start, _) in zip(ivs, ivs[1:]))
    # one stage per device: the device simulation is the stage simulation
    b = build("2bw", 4, 4, 3)
    assert simulate_devices(b).makespan == pytest.approx(simulate(b).makespan)
    assert simulate_devices(b).bubble_fraction == pytest.approx(simulate(b).bubble_fraction)
    with pytest.raises(ValueError, match="must partition the stages"):
        simulate_devices(s, [[0, 1], [1, 2, 3]])


def test_cli_prints_wpipe_per_device(capsys):
    from asyncpp.pipeline import cli

    assert cli.main(["--schedule", "wpipe", "--stages", "4", "--microbatches", "3",
                     "--t-forward", "0.5", "--t-backward", "1", "--width", "40"]) == 0
    out = capsys.readouterr().out
    assert "per device, 2 devices (partitions d and P/2+d on device d): steady-state bubble " \
           "fraction 0.0000, weight-version memory 0.7500 W" in out
    assert cli.main(["--schedule", "wpipe", "--stages", "3", "--microbatches", "4"]) == 2
    assert "even number of stages" in capsys.readouterr().err
