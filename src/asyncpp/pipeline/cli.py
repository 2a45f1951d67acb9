"""``asyncpp-schedule``: print (and optionally draw) a pipeline schedule's timeline.

Examples::

    asyncpp-schedule                                   # PipeDream-2BW, 4 stages, 4 microbatches
    asyncpp-schedule --schedule 1f1b --stages 4 --microbatches 8
    asyncpp-schedule --schedule 2bw --stages 4 --microbatches 8 --steps 2 --png /tmp/2bw.png
    asyncpp-schedule --schedule wpipe --stages 8 --microbatches 8 --t-forward 0.5 --t-backward 1
"""

from __future__ import annotations

import argparse
import sys

from .registry import get_spec
from .schedules import SCHEDULES, build
from .simulator import default_devices, simulate, steady_state_bubble, steady_state_devices
from .timeline import ascii, grid, plot, summary


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="asyncpp-schedule",
        description="Print the timeline of a pipeline schedule (simulated with fixed durations): "
                    "which stage runs which microbatch's forward or backward pass when, the idle "
                    "bubbles, and each stage's utilisation, delay and memory.",
        epilog="example: asyncpp-schedule --schedule 1f1b --stages 4 --microbatches 8",
    )
    p.add_argument("--schedule", default="2bw", choices=SCHEDULES,
                   help="pipeline schedule (default 2bw)")
    p.add_argument("--stages", type=int, default=4, help="pipeline stages P (default 4)")
    p.add_argument("--microbatches", type=int, default=4,
                   help="microbatches per step m (default 4)")
    p.add_argument("--steps", type=int, default=2, help="optimizer steps to show (default 2)")
    p.add_argument("--t-forward", type=float, default=1.0, help="forward time (default 1)")
    p.add_argument("--t-backward", type=float, default=2.0, help="backward time (default 2)")
    p.add_argument("--t-comm", type=float, default=0.0, help="message latency (default 0)")
    p.add_argument("--t-optimizer", type=float, default=0.0, help="update time (default 0)")
    p.add_argument("--width", type=int, default=None, help="truncate rows to this many chars")
    p.add_argument("--png", default=None, help="also write the timeline as a PNG (matplotlib)")
    p.add_argument("--grid", action="store_true",
                   help="also print each rank's program as a step x rank grid of actions in "
                        "their text form (1F2.3@v1: stage 1, forward of step 2 microbatch 3 "
                        "on version 1)")
    return p


def main(argv: list[str] | None = None) -> int:
    """Entry point of ``asyncpp-schedule``; returns the exit status."""
    args = _parser().parse_args(argv)
    try:
        sched = build(args.schedule, args.stages, args.microbatches, args.steps)
        res = simulate(sched, args.t_forward, args.t_backward, args.t_comm, args.t_optimizer)
        steady = steady_state_bubble(args.schedule, args.stages, args.microbatches,
                                     args.t_forward, args.t_backward, args.t_comm)
        # Per device: WPipe runs two partitions on each device (d and P/2 + d).
        dev_bubble, dev_memory = steady_state_devices(
            args.schedule, args.stages, args.microbatches, args.t_forward, args.t_backward,
            args.t_comm)
        n_dev = len(default_devices(sched))
        text = ascii(res, width=args.width)
        table = grid(sched) if args.grid else None
        if args.png:
            try:
                import matplotlib

                matplotlib.use("Agg")  # the CLI only writes files
            except ImportError:
                pass  # plot() explains how to install it
            plot(res, path=args.png)
    except (ValueError, OSError) as e:
        print(f"asyncpp-schedule: error: {e}", file=sys.stderr)
        return 2
    print(text)
    print()
    print(summary(res))
    print(f"steady-state bubble fraction: {steady:.4f}")
    pairing = " (partitions d and P/2+d on device d)" if get_spec(args.schedule).grouped else ""
    print(f"per device, {n_dev} devices{pairing}: steady-state bubble fraction "
          f"{dev_bubble:.4f}, weight-version memory {dev_memory:.4f} W (W = all weights)")
    if table is not None:
        print()
        print(table)
    if args.png:
        print(f"wrote {args.png}")
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
