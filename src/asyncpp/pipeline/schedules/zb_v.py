r"""ZB-V (Qi et al., "Zero Bubble Pipeline Parallelism", ICLR 2024): the model cut into P = 2R
stages placed two per device in a V — device d of R holds stages d and P − 1 − d — so the
forward runs down the devices and back up, the last stage shares the first stage's device, and
the loss's gradient starts back without crossing the pipeline. Each stage runs ZB-H1's order
(:mod:`.zb_h1`: every backward split into its input and weight halves, the weight halves
moved into idle time); a device interleaves its two stages by readiness
(:func:`asyncpp.pipeline.simulator.rank_programs`, then the executor's interleaving).
Synchronous, τ = 0, one version, a flush: the same math as 1F1B. Weights tied between the first
and the last stage are not supported (two stages of one device would share them).
"""

from __future__ import annotations

from .base import register
from .zb_h1 import ZeroBubbleH1


@register
class ZeroBubbleV(ZeroBubbleH1):
    name = "zb-v"
