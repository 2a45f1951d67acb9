"""The project's own experiments — the CPU reproduction (``tiny``, ``small``), the
compute-optimal ladder (``opt-180k``, ``opt-580k``) and its GPU rung (``gpu``) — as a layered
package: every tier is a study file, ``experiments/<tier>/study.toml``, and
:func:`report_tier` writes its ``tables.md`` and figures beside it from the result files
already there.

Layers, each importing only those before it (``tests/test_layering.py``):

1. data and tiers — ``paths``, ``provenance``, ``stats``, ``tables_cells``, ``tiers``,
   ``tables_opt``, ``tables`` (what each tier runs), ``claims``, ``plotting``;
2. shared readings — ``report_common`` (results, paired comparisons, shares);
3. tables — ``report_zero_gap``, ``report_paper``, ``report_beyond``, ``report_why``,
   ``report_opt``, ``report_gpu``; the ladder's verdicts, ``primary`` (its Holm family) and
   ``ladder_verdicts``;
4. figures — ``report_figures``; prose numbers — ``report_markers`` (a registry of plain
   functions, one per marker kind);
5. sections and entry — ``sections`` (table id → section function), ``report``, ``sweep``,
   ``reproduce``, ``gpu_plan``, ``gpu_worker``, ``gpu_transfer_fixture``.
"""

from __future__ import annotations

from .report import report_tier

__all__ = ["report_tier"]
