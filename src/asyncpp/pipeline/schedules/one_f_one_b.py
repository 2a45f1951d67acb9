"""1F1B with a flush (PipeDream-Flush, Narayanan et al., 2021): per step stage s runs P − 1 − s
warm-up forwards, then alternates forward and backward; one update, a flush. τ = 0, one
version, bubble (P − 1)/(m + P − 1), at most P − s activations stashed. Placed with several
stages per rank round-robin (stage s on rank s mod R), the same programs are looped 1F1B
(:func:`asyncpp.pipeline.simulator.looped_devices`)."""

from __future__ import annotations

from .base import Program, register


@register
class OneFOneB(Program):
    name = "1f1b"
