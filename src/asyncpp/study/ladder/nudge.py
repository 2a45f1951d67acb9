"""The perturbation the chaos measurements apply: a learning rate moved whole float32 units in
the last place (the weights and updates are float32, where a float64 ulp is lost)."""

from __future__ import annotations

import numpy as np


def nudged(lr: float, ulps: int) -> float:
    """``lr`` rounded to float32 and moved ``ulps`` float32 units in the last place upwards
    (``lr`` itself for 0)."""
    if ulps == 0:
        return lr
    x = np.float32(lr)
    for _ in range(ulps):
        x = np.nextafter(x, np.float32(np.inf))
    return float(x)


__all__ = ["nudged"]
