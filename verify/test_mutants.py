"""Property 8: the suite can fail. Each deliberately broken variant of the production code
(``verify/mutants.py``) is run through the *same* property functions, on a fixed small set of
instances per property (the probes below); each mutant must be rejected by at least one
property, and the production code must pass every probe (the control). The report records,
per mutant, which properties caught it."""

from __future__ import annotations

import pytest

from verify.mutants import MUTANTS
from verify.properties import (
    BandInstance,
    Instance,
    TightInstance,
    momentum_lemma,
    ns_band_check,
    stability_check,
    t1_bound,
    t2_bound,
    tightness_t1,
)
from verify.report import REPORT
from verify.systems import PRODUCTION


def _p1(system):
    return [t1_bound(Instance(family="isotropic", m=3, n=3, beta=0.0, eta=0.05, tau=1, K=60),
                     system),
            t1_bound(Instance(family="quadratic", m=4, n=3, beta=0.9, eta=0.05, tau=2, K=60),
                     system),
            t2_bound(Instance(family="isotropic", m=3, n=3, beta=0.5, eta=0.05, tau=1, K=60),
                     system)[0]]


def _p2(system):
    return [momentum_lemma(Instance(family=f, m=4, n=3, beta=b, eta=0.05, tau=1, K=80), system)
            for f, b in (("isotropic", 0.0), ("quadratic", 0.5), ("cauchy", 0.9))]


def _p3(system):
    return [r for dt in ("float64", "bfloat16") for kind in ("loguniform", "spike")
            for r in ns_band_check(BandInstance(m=8, n=5, batch=2, log10_cond=3.0, kind=kind,
                                                dtype=dt, seed=3), system)]


def _p4(system):
    return [r for b in (0.5, 0.9)
            for r in t2_bound(Instance(family="quadratic", m=4, n=3, beta=b, eta=0.05, tau=1,
                                       K=60), system)[1:]]


def _p5(system):
    return [r for tau, ef in ((1, False), (2, False), (1, True), (2, True))
            for r in stability_check([(0.5, 2.0)], tau, ef, system)]


def _p7(system):
    return [r for tau in (1, 2) for r in tightness_t1(TightInstance(tau=tau, eta=0.1), system)]


PROBES = {"P1": _p1, "P2": _p2, "P3": _p3, "P4": _p4, "P5": _p5, "P7": _p7}


def _run_probe(name, system) -> tuple[bool, str]:
    """(caught, message): caught when a record fails or the property cannot even run."""
    try:
        recs = PROBES[name](system)
    except Exception as exc:  # a mutant that crashes a property is caught by it
        return True, f"raised {type(exc).__name__}: {exc}"
    bad = [r for r in recs if not r.passed]
    if not bad:
        return False, f"all {len(recs)} checks passed"
    r = bad[0]
    return True, (f"{len(bad)}/{len(recs)} checks failed, e.g. {r.prop}: measured="
                  f"{r.measured:.6g} bound={r.bound:.6g} params={r.params}")


def test_production_passes_every_probe():
    for name in PROBES:
        caught, msg = _run_probe(name, PRODUCTION)
        assert not caught, f"control: production fails probe {name}: {msg}"


@pytest.mark.parametrize("mutant", sorted(MUTANTS))
def test_mutant_is_caught(mutant):
    system = MUTANTS[mutant]
    for name in PROBES:
        caught, msg = _run_probe(name, system)
        REPORT.mutant(mutant, name, caught, msg)
    caught_by = [p for p, v in REPORT.mutants[mutant].items() if v["caught"]]
    assert caught_by, f"mutant {mutant} survived every property: {REPORT.mutants[mutant]}"
