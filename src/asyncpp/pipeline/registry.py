r"""Every pipeline schedule's facts, in one place (no torch: the configuration reads it before
anything heavy is imported).

A :class:`ScheduleSpec` states what the configuration, the schedule builder, the executor and
the trainer need to know about a schedule; nobody compares schedule names:

============ ======== ====================== ========== ============ ======= ===============
schedule     async    delay τ_s of stage s   min m      sync windows tied W  updates / step
============ ======== ====================== ========== ============ ======= ===============
none         no       0                      1          —            yes     1
gpipe        no       0                      1          —            yes     1
1f1b         no       0                      1          —            yes     1
zb-h1        no       0                      1          —            yes     1
zb-v         no       0                      1          —            no      1
2bw          yes      1                      P − 1      yes          yes     1
pipedream    yes      P − 1 − s              1          no           no      m
wpipe        yes      1 (s < P/2), 0 (s ≥ P/2) P − 1  no           no      1
============ ======== ====================== ========== ============ ======= ===============

"none" is the single-process run without a pipeline (P = 1). 2BW needs m ≥ P − 1 so that
two weight versions suffice (:meth:`asyncpp.pipeline.Schedule.versions_held` proves it for
every P ≤ 8 in the tests). PipeDream's first and last stages have different delays, so a
weight tied between them (embedding and head) cannot be updated consistently.

WPipe (Yang et al., ICLR 2022, group-based interleaved pipelining) splits the P partitions
(P even) into two groups, G0 = partitions 0..P/2−1 and G1 = P/2..P−1; device d of P/2 holds
partition d of G0 and partition P/2 + d of G1. G1 drains every step, so its forwards of step
t+1 read the weights its update of step t produced (τ = 0, one version); the next step's
forwards through G0 are moved ahead of the current step's backwards (WPipe's "moving
operation"), so G0 reads the version one update older (τ = 1, two versions, 2BW's rule). See
:mod:`asyncpp.pipeline.schedules` for what is assumed and why. The executor runs the partitions
two per rank as the paper does (``placement=default_devices(schedule)``: rank d runs d and
P/2 + d, in the order the simulator merges them), or one per rank.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ScheduleSpec:
    """The facts of one schedule (see the module table)."""

    name: str
    asynchronous: bool
    flush_every_step: bool
    """Synchronous schedules drain after every step (GPipe, 1F1B)."""
    per_microbatch_updates: bool
    """One optimizer update per microbatch (PipeDream) instead of one per step."""
    sync_windows: bool
    """Synchronous start/cooldown can be realised (the delay may drop to 0)."""
    tied_weights: bool
    """Weights tied between the first and the last stage are allowed."""
    all_forwards_first: bool = False
    """GPipe: all forwards of a step, then all backwards (else 1F1B order)."""
    needs_pipeline: bool = True
    grouped: bool = False
    """Whether the partitions form two groups, as in WPipe, where the second half drains every
    step (τ = 0) and the first half does not (τ = 1)."""
    v_shaped: bool = False
    """Whether the P stages are placed two per device in a V (ZB-V); device d of P/2 holds
    stages d and P − 1 − d, so the first and the last stage share a device."""

    def stages_error(self, num_stages: int) -> str | None:
        """Why ``num_stages`` partitions cannot run this schedule (None if they can)."""
        if self.grouped and (num_stages < 2 or num_stages % 2):
            return (f"{self.name} splits the partitions into two groups of equal size, so it "
                    f"needs an even number of stages >= 2 (got {num_stages}); P stages run on "
                    "P/2 devices, two partitions each")
        if self.v_shaped and (num_stages < 2 or num_stages % 2):
            return (f"{self.name} places the stages two per device in a V, so it needs an even "
                    f"number of stages >= 2 (got {num_stages}); P stages run on P/2 devices")
        return None

    def in_second_group(self, num_stages: int, stage: int) -> bool:
        """WPipe: whether ``stage`` belongs to G1 (the later half, drained every step)."""
        return self.grouped and stage >= num_stages // 2

    def stage_delay(self, num_stages: int, stage: int) -> int:
        r"""The delay τₛ of stage s: 0 (synchronous), 1 (2BW) or :math:`P-1-s` (PipeDream)."""
        if not 0 <= stage < num_stages:
            raise ValueError(f"stage {stage} out of range for {num_stages} stages")
        if not self.asynchronous or self.in_second_group(num_stages, stage):
            return 0
        return num_stages - 1 - stage if self.per_microbatch_updates else 1

    def stage_delays(self, num_stages: int) -> list[int]:
        """The delay τₛ of every stage s of P."""
        return [self.stage_delay(num_stages, s) for s in range(num_stages)]

    def min_microbatches(self, num_stages: int) -> int:
        """The fewest microbatches per step this schedule runs correctly with on P stages
        (2BW and WPipe: P − 1, so that two versions suffice; ``check()`` proves it in the
        tests, and that P − 2 fails)."""
        return max(1, num_stages - 1) if (self.asynchronous and not self.per_microbatch_updates) \
            else 1

    def updates_per_step(self, num_microbatches: int) -> int:
        """How many optimizer updates one step makes (m for PipeDream, 1 otherwise)."""
        return num_microbatches if self.per_microbatch_updates else 1

    def lookahead_steps(self, num_stages: int, num_microbatches: int) -> int:
        r"""Steps beyond the current one whose forwards the first stage starts before it
        finishes the current step without draining: :math:`\lceil (P-1)/m\rceil` for the
        schedules that do not flush, 0 for those that do."""
        if self.flush_every_step:
            return 0
        return -(-(num_stages - 1) // num_microbatches)


SPECS: dict[str, ScheduleSpec] = {
    "none": ScheduleSpec("none", False, True, False, False, True, needs_pipeline=False),
    "gpipe": ScheduleSpec("gpipe", False, True, False, False, True, all_forwards_first=True),
    "1f1b": ScheduleSpec("1f1b", False, True, False, False, True),
    "zb-h1": ScheduleSpec("zb-h1", False, True, False, False, True),
    "zb-v": ScheduleSpec("zb-v", False, True, False, False, False, v_shaped=True),
    "2bw": ScheduleSpec("2bw", True, False, False, True, True),
    "pipedream": ScheduleSpec("pipedream", True, False, True, False, False),
    "wpipe": ScheduleSpec("wpipe", True, False, False, False, False, grouped=True),
}

PIPELINE_SCHEDULES = tuple(n for n, s in SPECS.items() if s.needs_pipeline)
"""The schedules the builder and the executor run: gpipe, 1f1b, 2bw, pipedream, wpipe."""
CONFIG_SCHEDULES = tuple(SPECS)
"""The values of ``pipeline.schedule``: the pipeline schedules and "none"."""
ASYNC_SCHEDULES = tuple(n for n, s in SPECS.items() if s.asynchronous)


def get_spec(name: str) -> ScheduleSpec:
    """The spec of schedule ``name`` (case-insensitive); ``ValueError`` naming the choices."""
    key = str(name).lower()
    if key not in SPECS:
        raise ValueError(f"unknown pipeline schedule {name!r}; allowed: "
                         f"{', '.join(PIPELINE_SCHEDULES)}")
    return SPECS[key]
