"""Hypothesis profiles for ``verify/`` and the per-property example budgets.

Profiles (select with the environment variable ``HYPOTHESIS_PROFILE``):

* ``ci`` — derandomized (the same examples every run, no example database), bounded example
  counts sized so that ``pytest verify/`` stays within its CI budget; the default when the
  ``CI`` environment variable is set.
* ``dev`` — the same example counts, but randomized with the example database on, so repeated
  local runs explore new instances and replay past failures; the default otherwise.
* ``thorough`` — randomized, ten times the examples, for long local runs.

Every heavy property states its ``ci`` example count through :func:`examples`; the profile
scales it. ``deadline`` is off everywhere (a trajectory of a few hundred optimizer steps has no
meaningful per-example deadline).
"""

from __future__ import annotations

import os

from hypothesis import HealthCheck, settings

_SCALE = {"ci": 1, "dev": 1, "thorough": 10}
_COMMON = dict(
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much,
                           HealthCheck.data_too_large],
    print_blob=True,
)

settings.register_profile("ci", derandomize=True, database=None, max_examples=10, **_COMMON)
settings.register_profile("dev", max_examples=10, **_COMMON)
settings.register_profile("thorough", max_examples=100, **_COMMON)


def active_profile() -> str:
    """The profile named by ``HYPOTHESIS_PROFILE``, else ``ci`` under CI, else ``dev``."""
    name = os.environ.get("HYPOTHESIS_PROFILE")
    if not name:
        name = "ci" if os.environ.get("CI") else "dev"
    if name not in _SCALE:
        raise ValueError(
            f"unknown HYPOTHESIS_PROFILE {name!r}; use one of {sorted(_SCALE)}"
        )
    return name


def load() -> str:
    """Load the active profile into hypothesis (idempotent) and return its name."""
    name = active_profile()
    settings.load_profile(name)
    return name


def examples(ci_count: int) -> settings:
    """``@examples(n)``: a property's example budget — ``n`` under ``ci``/``dev``, scaled under
    ``thorough``."""
    return settings(max_examples=max(1, ci_count * _SCALE[active_profile()]))


load()
