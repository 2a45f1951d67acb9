"""Property 8: the suite can fail. Each deliberately broken variant of the production code
(``verify/mutants.py``) is run through the *same* property functions, on a fixed small set of
instances per property (the probes below); production must pass every probe (the control),
and every mutant must be rejected by **at least two** properties, **at least one of them
theory-side** (a bound, lemma, band or orbit of ``theory/`` — not only an exact identity).
The table of which property catches which mutant is printed at the end of the session
(``verify/conftest.py``) and stored in the report; the two pipeline mutants run in a launch of
the multi-process executor (``LAUNCHES["pm"]`` of ``verify/test_pipeline.py``)."""

from __future__ import annotations

import pytest

from verify.cycle import CycleInstance, cycle_orbit
from verify.identities import (
    IdInstance,
    TaylorInstance,
    ef_identities,
    ef_momentum_lemma,
    nesterov_momentum_lemma,
    taylor_properties,
)
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


_ID = [IdInstance(family="quadratic", m=3, n=2, beta=0.9, tau=1, ef=True, sigma=0.3),
       IdInstance(family="cauchy", m=4, n=3, beta=0.5, tau=2, ef=False, nesterov=True),
       IdInstance(family="isotropic", m=1, n=1, beta=0.9, tau=1, ef=True, nesterov=True),
       IdInstance(family="quadratic", m=2, n=3, beta=0.0, tau=2, ef=True, sigma=0.0)]


def _identities(system):
    return [r for inst in _ID for r in ef_identities(inst, system)]


def _l1(system):
    return [ef_momentum_lemma(IdInstance(family=f, m=m, n=n, beta=b, tau=t, ef=True,
                                         sigma=0.0, steps=30), system)
            for f, m, n, b, t in (("isotropic", 1, 1, 0.5, 1), ("isotropic", 3, 3, 0.9, 1),
                                  ("quadratic", 3, 2, 0.0, 2))]


def _l2(system):
    return [nesterov_momentum_lemma(IdInstance(family="quadratic", m=3, n=2, beta=b, tau=t,
                                               ef=False, nesterov=True, sigma=0.0, steps=30),
                                    system) for b, t in ((0.9, 1), (0.5, 2))]


def _taylor(system, which):
    recs = [r for t in (1, 2) for r in taylor_properties(TaylorInstance(tau=t, seed=t), system)]
    return [r for r in recs if r.prop.startswith(which)]


def _p9(system):
    return [r for b, t, ef, nes in (("0", 1, False, False), ("1/2", 1, True, False),
                                    ("1/2", 2, False, True), ("9/10", 1, True, True))
            for r in cycle_orbit(CycleInstance(beta=b, tau=t, ef=ef, nesterov=nes), system)]


#: name -> (probe, side): "identity" (exact identity with production code) or "theory"
#: (a bound, lemma, band or orbit derived in theory/)
PROBES = {
    "P1": (_p1, "theory"), "P2": (_p2, "theory"), "P3": (_p3, "theory"),
    "P4": (_p4, "theory"), "P5": (_p5, "theory"), "P7": (_p7, "theory"),
    "I1-I3": (_identities, "identity"), "I4": (lambda s: _taylor(s, "I4"), "identity"),
    "L1": (_l1, "theory"), "L2": (_l2, "theory"), "L3": (lambda s: _taylor(s, "L3"), "theory"),
    "P9": (_p9, "theory"),
}
SIDE = {name: side for name, (_, side) in PROBES.items()}
SIDE.update({"P6.model": "identity", "P6.orbit": "theory", "P6.bound": "theory",
             # verify/test_nesterov.py: T3[Nesterov]'s edge, and theory's look-ahead polynomial
             # det(zI - A) (step N1) annihilating production's parameter sequence
             "P5-nesterov": "theory", "P5-nesterov.N1": "theory"})


def _run_probe(name, system) -> tuple[bool, str]:
    """(caught, message): caught when a record fails or the property cannot even run."""
    try:
        recs = PROBES[name][0](system)
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


def assert_caught_twice(mutant: str) -> None:
    """≥ 2 catching properties, ≥ 1 of them theory-side."""
    caught_by = [p for p, v in REPORT.mutants[mutant].items() if v["caught"]]
    theory = [p for p in caught_by if SIDE.get(p) == "theory"]
    assert len(caught_by) >= 2 and theory, (
        f"mutant {mutant} is caught by {caught_by or 'nothing'} (theory-side: {theory}); "
        f"needs >= 2 properties, >= 1 theory-side: {REPORT.mutants[mutant]}")


def test_ef_gamma_mutant_is_caught_twice():
    """The EF(γ) mutant (``verify.mutants.EF_GAMMA_MUTANT``, identical to production at γ = 1)
    against the EF(γ) identities and T3's EF(γ) critical step (P5 over γ)."""
    from verify.mutants import EF_GAMMA_MUTANT

    name = EF_GAMMA_MUTANT.name
    insts = [IdInstance(family="quadratic", m=3, n=2, beta=0.9, tau=t, ef=True, sigma=0.3,
                        gamma=g) for t, g in ((1, 0.5), (2, 2.0))]
    for prop, run_it in (
            ("I1-I3", lambda s: [r for i in insts for r in ef_identities(i, s)]),
            ("P5", lambda s: [r for tau, g in ((1, 0.5), (2, 2.0))
                              for r in stability_check([(0.5, 2.0)], tau, True, s, gamma=g)])):
        for system, control in ((PRODUCTION, True), (EF_GAMMA_MUTANT, False)):
            recs = run_it(system)
            bad = [r for r in recs if not r.passed]
            if control:
                assert not bad, f"control: production fails {prop} over EF(gamma): {bad[0]}"
            else:
                REPORT.mutant(name, prop, bool(bad),
                              f"{len(bad)}/{len(recs)} checks failed" if bad else "passed")
    assert_caught_twice(name)


@pytest.fixture(scope="module")
def pipeline_mutant_runs(tmp_path_factory):
    from verify.test_pipeline import LAUNCHES, launch

    return launch(LAUNCHES["pm"], tmp_path_factory.mktemp("pipeline_mutants"))


@pytest.mark.multiprocess
@pytest.mark.parametrize("mutant", ["pipeline_stage_version_off_by_one",
                                    "pipeline_wrong_weight_version"])
def test_pipeline_mutant_is_caught(pipeline_mutant_runs, mutant):
    """The executor mutants (``verify.mutants.patch_*``), run in the pipeline worker
    processes: property 6's delay model (P6.model), EF recursion (P6.ef), bound (P6.bound)
    and per-stage certified orbits (P6.orbit)."""
    from verify.properties import pipeline_check
    from verify.test_pipeline import LAUNCHES, PIPELINE_MUTANTS

    for name in PIPELINE_MUTANTS[mutant]:
        sc = next(s for s in LAUNCHES["pm"]["scenarios"] if s["name"] == name)
        recs = pipeline_check(sc, pipeline_mutant_runs)
        for prop in sorted({r.prop for r in recs}):
            bad = [r for r in recs if r.prop == prop and not r.passed]
            msg = (f"{name}: {prop} measured={bad[0].measured:.6g} bound={bad[0].bound:.6g}"
                   if bad else f"{name}: {prop} passed")
            REPORT.mutant(mutant, prop, bool(bad), msg)
    assert_caught_twice(mutant)


@pytest.mark.parametrize("mutant", sorted(MUTANTS))
def test_mutant_is_caught(mutant):
    system = MUTANTS[mutant]
    for name in PROBES:
        caught, msg = _run_probe(name, system)
        REPORT.mutant(mutant, name, caught, msg)
    assert_caught_twice(mutant)
