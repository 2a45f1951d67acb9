"""Draw a simulated schedule: an ASCII timeline for terminals, a step × rank grid of the
programs in the actions' text form, a matplotlib figure for the book.

The timeline and the figure take a :class:`~asyncpp.pipeline.simulator.SimResult` (or a
:class:`~asyncpp.pipeline.schedules.Schedule`, simulated with the default durations
1 for a forward, 2 for a backward, 0 for communication).
"""

from __future__ import annotations

import math

from .actions import is_compute, to_str
from .schedules import Schedule
from .simulator import SimResult, default_devices, simulate, simulate_devices


def _as_result(obj) -> SimResult:
    if isinstance(obj, SimResult):
        return obj
    if isinstance(obj, Schedule):
        return simulate(obj)
    raise ValueError(f"expected a Schedule or a SimResult, got {type(obj).__name__}")


def _resolution(res: SimResult) -> float:
    durations = [iv.end - iv.start for iv in res.intervals if iv.end > iv.start]
    starts = [iv.start for iv in res.intervals]
    unit = min(durations, default=1.0)
    # Shrink the unit until every boundary lies on the grid (up to 1/8 of the smallest).
    for div in (1, 2, 4, 8):
        u = unit / div
        if all(abs(x / u - round(x / u)) < 1e-9 for x in starts + durations):
            return u
    return unit / 8


def ascii(result, width: int | None = None, resolution: float | None = None) -> str:
    """The timeline as text: one row per stage, one cell per ``resolution`` time units.

    A cell shows the kind (``F`` forward, ``B`` backward, ``U`` update; upper case for even
    steps, lower case for odd ones, so overlapping steps stand out) and the microbatch index;
    ``.`` is idle (a bubble). ``width`` truncates long rows (with a trailing ``>``)."""
    res = _as_result(result)
    sched = res.schedule
    unit = resolution if resolution is not None else _resolution(res)
    if not unit > 0:
        raise ValueError(f"resolution must be > 0, got {resolution!r}")
    m = sched.num_microbatches
    id_w = len(str(max(m - 1, 0)))
    cw = 1 + id_w
    ncells = int(math.ceil(res.makespan / unit - 1e-9))
    rows = [["." * cw for _ in range(ncells)] for _ in range(sched.num_stages)]
    for iv in res.intervals:
        a, b = int(round(iv.start / unit)), int(round(iv.end / unit))
        kind = iv.kind if iv.step % 2 == 0 else iv.kind.lower()
        label = kind + ("" if iv.mb is None else str(iv.mb)).rjust(id_w)
        label = label.ljust(cw)
        for c in range(a, max(b, a + 1) if iv.end > iv.start else a):
            rows[iv.stage][c] = label
    name_w = len(f"stage {sched.num_stages - 1}")
    names = {"F": "forward", "B": "backward", "I": "backward-input", "W": "backward-weight",
             "U": "update"}
    kinds = [k for k in names if any(iv.kind == k and iv.end > iv.start for iv in res.intervals)]
    legend = ("/".join(kinds) + " = " + "/".join(names[k] for k in kinds) + ", ") if kinds else ""
    lines = [
        f"{sched.name}: P={sched.num_stages} m={m} steps={sched.num_steps}  "
        f"makespan={res.makespan:g}  bubble={res.bubble_fraction:.3f}  "
        f"(one cell = {unit:g} time unit{'' if unit == 1 else 's'}; {legend}lower case = odd "
        f"step, . = idle)"
    ]
    for s, row in enumerate(rows):
        text = " ".join(row)
        if width is not None and len(text) > width:
            text = text[: max(width - 1, 0)] + ">"
        lines.append(f"{f'stage {s}':<{name_w}} | {text}")
    return "\n".join(lines)


def grid(schedule: Schedule, devices=None, compute_only: bool = True) -> str:
    """Each rank's program as a table: one column per rank (``devices``: the stages each rank
    holds, default :func:`~asyncpp.pipeline.simulator.default_devices`), one row per program
    slot, each cell an action in its text form (``1F2.3@v1``: stage 1, forward of step 2
    microbatch 3 on version 1; see :mod:`asyncpp.pipeline.actions`). ``compute_only`` leaves
    the sends and receives out."""
    devs = default_devices(schedule) if devices is None else devices
    progs = simulate_devices(schedule, devs, weight_memory=False).programs
    cols = [[to_str(a) for a in p if not compute_only or is_compute(a)] for p in progs]
    heads = [f"rank {r} ({','.join(map(str, d))})" for r, d in enumerate(devs)]
    widths = [max([len(h), *map(len, c)]) for h, c in zip(heads, cols)]
    n = max((len(c) for c in cols), default=0)
    slot_w = len(f"{max(n - 1, 0)}")
    lines = [" " * slot_w + " | " + " | ".join(h.ljust(w) for h, w in zip(heads, widths))]
    for k in range(n):
        cells = [(c[k] if k < len(c) else "").ljust(w) for c, w in zip(cols, widths)]
        lines.append(f"{k:>{slot_w}} | " + " | ".join(cells).rstrip())
    return "\n".join(lines)


def summary(result) -> str:
    """Per-stage numbers of a run: utilisation, delay, weight versions held, peak stashed
    activations (all computed from the schedule data)."""
    res = _as_result(result)
    sched = res.schedule
    delays, held, acts = sched.delays(), sched.versions_held(), sched.peak_activations()
    lines = ["stage  utilisation  delay  versions  peak activations"]
    for s in range(sched.num_stages):
        d = ",".join(str(x) for x in sorted(delays[s])) or "-"
        lines.append(f"{s:>5}  {res.utilisation[s]:>11.3f}  {d:>5}  {held[s]:>8}  {acts[s]:>16}")
    return "\n".join(lines)


def plot(result, ax=None, path=None, title: str | None = None):
    """A Gantt chart of the run (matplotlib): stages as rows, forwards/backwards/updates as
    bars coloured by kind and shaded by step, labelled with the microbatch index. Writes
    ``path`` if given; returns the figure."""
    try:
        import matplotlib.pyplot as plt
    except ImportError as e:  # pragma: no cover - depends on the environment
        raise ValueError(
            "plotting a timeline needs matplotlib; install it with `pip install matplotlib` "
            "(or the package's [book] extra)"
        ) from e
    res = _as_result(result)
    sched = res.schedule
    P = sched.num_stages
    if ax is None:
        fig, ax = plt.subplots(figsize=(max(6.0, min(24.0, res.makespan / 3)), 0.6 * P + 1.2))
    else:
        fig = ax.figure
    colours = {"F": ("#4C72B0", "#9DB4DA"), "B": ("#DD8452", "#F0BF9D"),
               "I": ("#DD8452", "#F0BF9D"), "W": ("#8172B3", "#C3BBDD"),
               "U": ("#55A868", "#A5D6B0")}
    for iv in res.intervals:
        dur = iv.end - iv.start
        colour = colours[iv.kind][iv.step % 2]
        y = P - 1 - iv.stage
        if dur <= 0:
            ax.plot([iv.start, iv.start], [y - 0.4, y + 0.4], color=colours["U"][0], lw=2)
            continue
        ax.broken_barh([(iv.start, dur)], (y - 0.4, 0.8), facecolors=colour,
                       edgecolors="black", linewidth=0.4)
        if iv.mb is not None:
            ax.text(iv.start + dur / 2, y, str(iv.mb), ha="center", va="center", fontsize=7)
    ax.set_yticks(range(P))
    ax.set_yticklabels([f"stage {P - 1 - y}" for y in range(P)])
    ax.set_xlim(0, res.makespan)
    ax.set_xlabel("time")
    ax.set_title(title or f"{sched.name}: P={P}, m={sched.num_microbatches}, "
                 f"steps={sched.num_steps}, bubble={res.bubble_fraction:.3f}")
    from matplotlib.patches import Patch

    ax.legend(handles=[Patch(color=colours["F"][0], label="forward"),
                       Patch(color=colours["B"][0], label="backward"),
                       Patch(color=colours["U"][0], label="update"),
                       Patch(color=colours["F"][1], label="(light: odd step)")],
              loc="upper center", bbox_to_anchor=(0.5, -0.25), ncol=4, fontsize=7,
              frameon=False)
    fig.tight_layout()
    if path is not None:
        fig.savefig(path, dpi=120)
    return fig
