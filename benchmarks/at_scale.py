"""When asynchronous pipelining pays, at P ∈ {4, 8, 16, 32} stages: PipeDream-2BW against
1F1B, interleaved 1F1B and the zero-bubble schedules ZB-H1 and ZB-V, from measured op costs.

Costs (per stage and microbatch): forward ``t_f``, backward ``t_b`` (of which ``t_w`` computes
weight gradients, ``t_b − t_w`` input gradients), the optimizer update ``t_upd`` and one
activation message ``t_c`` — the demo transformer's, measured by ``peer_torch.py`` (its
``results/peer_torch.json``; the slower of the two measured stages). Every stage is taken to
cost what the measured stage costs (the model grows with P), so the ratios between schedules,
not the absolute times, are the result.

Step time T of one optimizer step of m microbatches on P devices, and its derivation:

* **1F1B** and **2BW**: :func:`asyncpp.pipeline.simulator.simulate` of the schedules asyncpp
  runs (``schedules.build``), steady state (the makespan of N + 1 steps minus that of N), the
  update as work on each stage. Without messages 1F1B, which flushes every step, takes
  :math:`T = (m + P - 1)(t_f + t_b) + t_{upd}` and 2BW, which does not,
  :math:`T = m(t_f + t_b) + t_{upd}`; the messages add what the simulation finds,
  :math:`c_{P,m}` for 1F1B.
* **interleaved 1F1B** (Narayanan et al., 2021; v = 2 model chunks per device, m a multiple
  of P): not a schedule of asyncpp's simulator, so its published step time is used,
  :math:`T = m(t_f + t_b) + (P - 1)(t_f + t_b)/v + t_{upd} + c_{P,m}` (1F1B's message cost
  assumed), with
  :math:`\\min(mv,\\ 2(P - 1) + (v - 1)P + 1)` chunk-microbatches of activations held on device 0
  (Megatron-LM's warm-up count + 1), i.e. that many :math:`1/v` of a stage-microbatch.
* **ZB-H1** and **ZB-V** (Qi et al., 2024; the backward split into input and weight
  gradients; ZB-V: two stages per device in a V, 2P stages of half a stage's cost each):
  asyncpp's own schedules (``schedules.zb_h1``, ``schedules.zb_v``), simulated like 1F1B with
  the backward split at the measured weight part (``simulate_devices(..., t_weight=t_w)``),
  ZB-V from m = P.
* **ZB-V (published bubble)**, beside the simulated one as a check of the engine: its
  published bubble,
  :math:`T = m(t_f + t_b) + (P - 1)\\max(0,\\ t_f + t_b - 3t_w) + t_{upd} + c_{P,m}`
  — ZB-H2's bubble :math:`(P - 1)(T_F + T_B - 2T_W)` in the paper's terms, where the backward
  :math:`T_B = t_b - t_w` excludes the weight gradients :math:`T_W = t_w`; the V shape reaches it
  with 1F1B's activation memory, P stage-microbatches on the first device — for m ≥ 2P, where
  the schedule reaches its steady state; below 2P it is not modelled.

Memory per device: weights in units of one stage's parameters (2BW keeps two versions: 2;
optimizer state is the same for all and left out), activations in units of one microbatch's
activations through one stage (``a``), the peak over the step (for the simulated schedules:
forwards whose backward has not run, counted from the simulated intervals). Throughput relative
to 1F1B = :math:`T_{1F1B} / T`; bubble = :math:`1 - (m(t_f + t_b) + t_{upd}) / T`.

    .venv/bin/python benchmarks/at_scale.py          # writes results/at_scale.json
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
SCHEDULES = ("1f1b", "2bw", "interleaved-1f1b", "zb-h1", "zb-v", "zb-v-formula")
LABEL = {"1f1b": "1F1B", "2bw": "2BW", "interleaved-1f1b": "interleaved 1F1B (v=2)",
         "zb-h1": "ZB-H1", "zb-v": "ZB-V", "zb-v-formula": "ZB-V (paper)"}
WHY_NOT = {"interleaved-1f1b": "m not a multiple of P", "zb-v": "m < P",
           "zb-v-formula": "m < 2P"}


def costs_from_peer(path: Path = HERE / "results" / "peer_torch.json",
                    model: str = "demo") -> dict:
    """The slower measured stage's costs (seconds) of ``model`` in the peer benchmark's JSON;
    ``t_w`` = ``t_b − t_bi`` on the stage whose input gradient was measured (the last), else
    ``t_b / 2``."""
    data = json.loads(Path(path).read_text())
    stages = data["costs"][model]
    t_f = max(c["t_f"] for c in stages)
    t_b = max(c["t_b"] for c in stages)
    split = [c for c in stages if c.get("t_bi") is not None]
    frac = (1 - split[-1]["t_bi"] / split[-1]["t_b"]) if split else 0.5
    frac = min(max(frac, 0.0), 1.0)
    return {"t_f": t_f, "t_b": t_b, "t_w": frac * t_b,
            "t_upd": max(c["t_upd"] for c in stages),
            "t_c": sum(c["t_msg"] for c in stages) / len(stages),
            "source": f"{Path(path).name} ({model}, run of {data['run']['date']})"}


def _activation_peak(sim, num_stages: int) -> int:
    """Most forwards without their backward yet, on any stage, from the simulated intervals."""
    peak = 0
    for s in range(num_stages):
        held = 0
        for iv in sorted((i for i in sim.intervals if i.stage == s), key=lambda i: i.start):
            held += 1 if iv.kind == "F" else (-1 if iv.kind == "B" else 0)
            peak = max(peak, held)
    return peak


def simulated(name: str, P: int, m: int, c: dict, warm: int = 2) -> dict:
    """Steady-state step time and peak activations of an asyncpp schedule (simulator)."""
    from asyncpp.pipeline.schedules import build
    from asyncpp.pipeline.simulator import simulate

    kw = dict(t_forward=c["t_f"], t_backward=c["t_b"], t_comm=c["t_c"], t_optimizer=c["t_upd"])
    a = simulate(build(name, P, m, warm), **kw)
    b = simulate(build(name, P, m, warm + 1), **kw)
    return {"T": b.makespan - a.makespan, "act": _activation_peak(b, P),
            "weights": 2 if name == "2bw" else 1}


def _activation_peak_devices(sim, per_stage: float) -> float:
    """Most activations held on any device, from the simulated intervals: a forward holds one
    until its backward (``B``) or, split, its weight half (``W``, which still reads the input)
    has run; ``per_stage`` converts a partition's microbatch to stage-microbatches."""
    peak = 0.0
    for dev in sim.devices:
        held = 0
        for iv in sorted((i for i in sim.intervals if i.stage in dev), key=lambda i: i.start):
            held += 1 if iv.kind == "F" else (-1 if iv.kind in ("B", "W") else 0)
            peak = max(peak, held * per_stage)
    return peak


def zero_bubble_simulated(name: str, P: int, m: int, c: dict, warm: int = 2) -> dict | None:
    """ZB-H1 on P devices, or ZB-V on P devices (2P stages of half a stage's cost, two per
    device in a V), simulated with the backward split at the measured weight part ``t_w``
    (:func:`asyncpp.pipeline.simulator.simulate_devices`), steady state as for 1F1B; None for
    ZB-V below m = P (no V steady state with fewer microbatches than devices)."""
    from asyncpp.pipeline.schedules import build
    from asyncpp.pipeline.simulator import simulate_devices

    stages, f = (P, 1.0) if name == "zb-h1" else (2 * P, 0.5)
    if name == "zb-v" and m < P:
        return None
    kw = dict(t_forward=f * c["t_f"], t_backward=f * c["t_b"], t_comm=c["t_c"],
              t_optimizer=f * c["t_upd"], t_weight=f * c["t_w"], weight_memory=False)
    a = simulate_devices(build(name, stages, m, warm), None, **kw)
    b = simulate_devices(build(name, stages, m, warm + 1), None, **kw)
    return {"T": b.makespan - a.makespan, "act": _activation_peak_devices(b, f), "weights": 1}


def interleaved(P: int, m: int, c: dict, comm: float, v: int = 2) -> dict | None:
    """Interleaved 1F1B (published step time, Megatron-LM's warm-up count, message cost
    ``comm``); None unless m is a multiple of P."""
    if m % P:
        return None
    t = c["t_f"] + c["t_b"]
    T = m * t + (P - 1) * t / v + c["t_upd"] + comm
    held = min(m * v, 2 * (P - 1) + (v - 1) * P + 1)
    return {"T": T, "act": held / v, "weights": 1}


def zero_bubble_v(P: int, m: int, c: dict, comm: float) -> dict | None:
    """ZB-V (published bubble, 1F1B's activation memory, message cost ``comm``); None for
    m < 2P."""
    if m < 2 * P:
        return None
    t = c["t_f"] + c["t_b"]
    T = m * t + (P - 1) * max(0.0, t - 3 * c["t_w"]) + c["t_upd"] + comm
    return {"T": T, "act": P, "weights": 1}


def one_f_one_b_formula(P: int, m: int, c: dict) -> float:
    """1F1B's closed-form step time without messages, (m + P − 1)(t_f + t_b) + t_upd: the
    simulator's at t_c = 0 (the formulas share its conventions)."""
    return (m + P - 1) * (c["t_f"] + c["t_b"]) + c["t_upd"]


def table(c: dict, Ps=(4, 8, 16, 32), factors=(1, 2, 4)) -> list[dict]:
    """One row per (P, m, schedule): step time, throughput relative to 1F1B, bubble, weight
    and activation memory per device."""
    rows = []
    for P in Ps:
        for f in factors:
            m = int(P * f)
            work = m * (c["t_f"] + c["t_b"]) + c["t_upd"]
            one = simulated("1f1b", P, m, c)
            comm = one["T"] - one_f_one_b_formula(P, m, c)  # what the messages add to 1F1B
            cells = {"1f1b": one, "2bw": simulated("2bw", P, m, c),
                     "interleaved-1f1b": interleaved(P, m, c, comm),
                     "zb-h1": zero_bubble_simulated("zb-h1", P, m, c),
                     "zb-v": zero_bubble_simulated("zb-v", P, m, c),
                     "zb-v-formula": zero_bubble_v(P, m, c, comm)}
            base = cells["1f1b"]["T"]
            for name in SCHEDULES:
                r = cells[name]
                if r is None:
                    rows.append({"P": P, "m": m, "schedule": name, "modelled": False})
                    continue
                rows.append({"P": P, "m": m, "schedule": name, "modelled": True,
                             "step_s": r["T"], "throughput_vs_1f1b": base / r["T"],
                             "bubble": 1 - work / r["T"], "weights": r["weights"],
                             "activations": r["act"],
                             "how": ("formula" if name in ("interleaved-1f1b", "zb-v-formula")
                                     else "simulated")})
    return rows


def best_synchronous(rows: list[dict]) -> dict[tuple[int, int], dict]:
    """Per (P, m): the fastest synchronous schedule's row, and 2BW's (ZB-V's published bubble
    is a check of the engine's ZB-V, not a schedule of its own)."""
    out: dict[tuple[int, int], dict] = {}
    for r in rows:
        if not r["modelled"] or r["schedule"] == "zb-v-formula":
            continue
        k = (r["P"], r["m"])
        cell = out.setdefault(k, {})
        if r["schedule"] == "2bw":
            cell["2bw"] = r
        elif "sync" not in cell or r["throughput_vs_1f1b"] > cell["sync"]["throughput_vs_1f1b"]:
            cell["sync"] = r
    return out


def render(rows: list[dict]) -> str:
    """Markdown: per (P, m) every schedule's throughput relative to 1F1B, bubble, and memory
    per device (weights in stage-weights, activations in stage-microbatches)."""
    head = "| P | m | schedule | throughput ÷ 1F1B | bubble | weights | activations |"
    out = [head, "| --- | --- | --- | --- | --- | --- | --- |"]
    for r in rows:
        if not r["modelled"]:
            why = WHY_NOT[r["schedule"]]
            out.append(f"| {r['P']} | {r['m']} | {LABEL[r['schedule']]} | — ({why}) | | | |")
            continue
        out.append(f"| {r['P']} | {r['m']} | {LABEL[r['schedule']]} | "
                   f"{r['throughput_vs_1f1b']:.2f} | {100 * r['bubble']:.0f} % | "
                   f"{r['weights']} | {r['activations']:g} |")
    return "\n".join(out) + "\n"


def render_pivot(rows: list[dict]) -> str:
    """Markdown, one line per (P, m): throughput relative to 1F1B of each schedule (and its
    bubble), then per schedule the memory per device at the largest P."""
    by = {(r["P"], r["m"], r["schedule"]): r for r in rows}
    keys = sorted({(r["P"], r["m"]) for r in rows})
    shown = [s for s in SCHEDULES if s != "zb-v-formula"]  # the check is in the long table
    out = ["| P | m | " + " | ".join(f"{LABEL[s]} (bubble)" for s in shown) + " |",
           "| --- | --- | " + " | ".join("---" for _ in shown) + " |"]
    for P, m in keys:
        cells = []
        for s in shown:
            r = by[(P, m, s)]
            cells.append(f"{r['throughput_vs_1f1b']:.2f} ({100 * r['bubble']:.0f} %)"
                         if r["modelled"] else "—")
        out.append(f"| {P} | {m} | " + " | ".join(cells) + " |")
    return "\n".join(out) + "\n"


def render_memory(rows: list[dict]) -> str:
    """Markdown: per schedule and P, weights (stage-weights) and activations (stage-microbatches)
    per device, the most over the microbatch counts modelled."""
    Ps = sorted({r["P"] for r in rows})
    out = ["| schedule | " + " | ".join(f"P = {P}: weights, activations" for P in Ps) + " |",
           "| --- | " + " | ".join("---" for _ in Ps) + " |"]
    for s in SCHEDULES:
        cells = []
        for P in Ps:
            rs = [r for r in rows if r["P"] == P and r["schedule"] == s and r["modelled"]]
            cells.append(f"{max(r['weights'] for r in rs)}, {max(r['activations'] for r in rs):g}"
                         if rs else "—")
        out.append(f"| {LABEL[s]} | " + " | ".join(cells) + " |")
    return "\n".join(out) + "\n"


# 2BW's lead over the best synchronous schedule below which the synchronous one is advised: a
# few percent do not buy a second weight version per device and a stale gradient.
LEAD = 1.10


def verdict(rows: list[dict], lead: float = LEAD) -> list[str]:
    """Sentences, computed: per P, the m where 2BW leads by ``lead`` or more and by how much,
    and where the best synchronous schedule comes within that with one weight version."""
    lines = []
    cells = best_synchronous(rows)
    for P in sorted({k[0] for k in cells}):
        ahead, tie = [], []
        for (p, m), c in sorted(cells.items()):
            if p != P:
                continue
            gain = c["2bw"]["throughput_vs_1f1b"] / c["sync"]["throughput_vs_1f1b"]
            (ahead if gain >= lead else tie).append((m, gain, c["sync"]["schedule"]))
        parts = []
        if ahead:
            parts.append(f"2BW is at least {100 * (lead - 1):.0f} % faster than the best "
                         "synchronous schedule at m = "
                         + ", ".join(f"{m} ({g:.3f}× {LABEL[s]})" for m, g, s in ahead))
        if tie:
            parts.append(f"a synchronous schedule is within {100 * (lead - 1):.0f} % of 2BW, "
                         "with one weight version and no staleness, at m = "
                         + ", ".join(f"{m} ({LABEL[s]}, 2BW {g:.3f}×)" for m, g, s in tie))
        lines.append(f"P = {P}: " + "; ".join(parts) + ".")
    return lines


def facts(rows: list[dict]) -> dict:
    """What the advice rests on, computed from the rows: 2BW ÷ the best synchronous schedule
    per m/P (min, max over P, which schedules), 2BW ÷ ZB-V where ZB-V is modelled (min, max),
    the same at m = P, and whether interleaved 1F1B is ever ahead of ZB-V where both are
    modelled."""
    by = {(r["P"], r["m"], r["schedule"]): r for r in rows if r["modelled"]}

    def thr(P, m, s):
        return by[(P, m, s)]["throughput_vs_1f1b"]

    zb = [thr(P, m, "2bw") / thr(P, m, "zb-v") for (P, m, s) in by if s == "zb-v"]
    zbh = [thr(P, m, "2bw") / thr(P, m, "zb-h1") for (P, m, s) in by if s == "zb-h1"]
    # the engine's ZB-V against the published bubble, where both are modelled
    formula = [thr(P, m, "zb-v") / thr(P, m, "zb-v-formula") for (P, m, s) in by
               if s == "zb-v-formula" and (P, m, "zb-v") in by]
    cells = best_synchronous(rows)
    at_p = [(c["2bw"]["throughput_vs_1f1b"] / c["sync"]["throughput_vs_1f1b"],
             c["sync"]["schedule"]) for (P, m), c in cells.items() if m == P]
    both = [(P, m) for (P, m, s) in by if s == "zb-v" and (P, m, "interleaved-1f1b") in by]
    by_factor: dict[str, dict] = {}
    for (P, m), c in sorted(cells.items()):
        f = by_factor.setdefault(f"{m / P:g}", {"gain": {}, "sync": set()})
        f["gain"][P] = c["2bw"]["throughput_vs_1f1b"] / c["sync"]["throughput_vs_1f1b"]
        f["sync"].add(LABEL[c["sync"]["schedule"]])
    return {"2bw_over_best_sync_by_m_over_P": {
                k: {"min": min(v["gain"].values()), "max": max(v["gain"].values()),
                    "by_P": v["gain"], "best_sync": sorted(v["sync"])}
                for k, v in by_factor.items()},
            "2bw_over_zbv": [min(zb), max(zb)] if zb else None,
            "2bw_over_zbh1": [min(zbh), max(zbh)] if zbh else None,
            "zbv_engine_over_formula": [min(formula), max(formula)] if formula else None,
            "2bw_over_best_sync_at_m_eq_P": [min(g for g, _ in at_p), max(g for g, _ in at_p)]
            if at_p else None,
            "best_sync_at_m_eq_P": sorted({LABEL[s] for _, s in at_p}),
            "interleaved_ahead_of_zbv": any(thr(P, m, "interleaved-1f1b") > thr(P, m, "zb-v")
                                            for P, m in both)}


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--costs", type=Path, default=HERE / "results" / "peer_torch.json",
                    help="the peer benchmark's JSON to read the op costs from")
    ap.add_argument("--model", default="demo", choices=["demo", "mlp"])
    ap.add_argument("--stages", type=int, nargs="+", default=[4, 8, 16, 32])
    ap.add_argument("--m-factors", type=float, nargs="+", default=[1, 2, 4],
                    help="microbatch counts as multiples of P")
    a = ap.parse_args(argv)
    c = costs_from_peer(a.costs, a.model)
    rows = table(c, a.stages, a.m_factors)
    # Without messages the simulator and the closed form agree on 1F1B (shared conventions).
    quiet = {**c, "t_c": 0.0}
    check = max(abs(simulated("1f1b", P, int(P * f), quiet)["T"]
                    - one_f_one_b_formula(P, int(P * f), quiet))
                / one_f_one_b_formula(P, int(P * f), quiet)
                for P in a.stages for f in a.m_factors)
    result = {"costs": c, "rows": rows, "verdict": verdict(rows), "facts": facts(rows),
              "one_f_one_b_simulator_vs_formula": check}
    print(f"op costs ({c['source']}): " + ", ".join(
        f"{k} = {1e3 * c[k]:.2f} ms" for k in ("t_f", "t_b", "t_w", "t_upd", "t_c")))
    print(render(rows))
    print("\n".join(result["verdict"]))
    print(f"1F1B without messages: simulator vs closed form, largest relative difference "
          f"{check:.1e}")
    sys.path.insert(0, str(HERE))
    from bench_common import save

    print(f"wrote {save('at_scale', result)}")
    if not os.environ.get("ASYNCPP_BENCH_RESULTS"):
        write_readme(result)
    return result


def write_readme(result: dict, readme: Path = HERE / "README.md") -> None:
    """Replace the README's generated block (between the markers) with this result's tables."""
    c = result["costs"]
    body = (f"Op costs from {c['source']}: "
            + ", ".join(f"{k} = {1e3 * c[k]:.2f} ms" for k in ("t_f", "t_b", "t_w", "t_upd", "t_c"))
            + ".\n\nThroughput relative to 1F1B (bubble):\n\n" + render_pivot(result["rows"])
            + "\nMemory per device (weights in stage-weights, activations in "
            "stage-microbatches):\n\n" + render_memory(result["rows"]) + "\n"
            + "\n".join(f"- {ln}" for ln in result["verdict"]) + "\n")
    sys.path.insert(0, str(HERE))
    from bench_common import write_readme_block

    write_readme_block("at_scale", body, str(readme))


if __name__ == "__main__":
    if os.environ.get("OMP_NUM_THREADS") is None:
        os.environ["OMP_NUM_THREADS"] = "1"
    main()
