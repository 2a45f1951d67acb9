"""Hypothesis strategies for the property instances, and the assert-and-report helper."""

from __future__ import annotations

from hypothesis import strategies as st

from .properties import FAMILIES, BandInstance, BlockInstance, Instance, TightInstance
from .report import REPORT, Record


def log_uniform(lo_exp: float, hi_exp: float):
    """10**U(lo_exp, hi_exp)."""
    return st.floats(lo_exp, hi_exp, allow_nan=False).map(lambda e: float(10.0 ** e))


betas = st.one_of(st.just(0.0), st.floats(0.0, 0.99), st.sampled_from([0.5, 0.9, 0.95, 0.99]))


@st.composite
def instances(draw, *, taus=None, noisy=True, max_dim=8, max_K=150,
              seeds=4, dtypes=("float64", "bfloat16"), nesterov=True):
    """An :class:`~verify.properties.Instance` of delayed Muon on a drawn problem."""
    sigma = draw(st.one_of(st.just(0.0), log_uniform(-1.3, 0.3))) if noisy else 0.0
    return Instance(
        family=draw(st.sampled_from(FAMILIES)),
        m=draw(st.integers(1, max_dim)),
        n=draw(st.integers(1, max_dim)),
        beta=draw(betas),
        eta=draw(log_uniform(-3, -0.7)),
        tau=draw(taus if taus is not None else st.integers(0, 3)),
        sigma=sigma,
        K=draw(st.integers(10, max_K)),
        seeds=seeds if sigma > 0 else 1,
        problem_seed=draw(st.integers(0, 2**16)),
        ns_dtype=draw(st.sampled_from(dtypes)),
        nesterov=draw(st.booleans()) if nesterov else False,
    )


@st.composite
def block_instances(draw, max_stages=4, max_dim=5, max_K=120, seeds=4):
    """A :class:`~verify.properties.BlockInstance`: P stages with PipeDream, 2BW or arbitrary
    per-stage delays."""
    P = draw(st.integers(2, max_stages))
    shapes = tuple((draw(st.integers(1, max_dim)), draw(st.integers(1, max_dim)))
                   for _ in range(P))
    kind = draw(st.sampled_from(["pipedream", "2bw", "any"]))
    if kind == "pipedream":
        taus = tuple(P - 1 - s for s in range(P))
    elif kind == "2bw":
        taus = (1,) * P
    else:
        taus = tuple(draw(st.integers(0, 3)) for _ in range(P))
    sigma = draw(st.one_of(st.just(0.0), log_uniform(-1.3, 0.0)))
    return BlockInstance(shapes=shapes, taus=taus, beta=draw(betas),
                         eta=draw(log_uniform(-3, -0.7)), sigma=sigma,
                         K=draw(st.integers(10, max_K)), seeds=seeds if sigma > 0 else 1,
                         problem_seed=draw(st.integers(0, 2**16)),
                         phi=draw(st.sampled_from(["cauchy", "cosine"])))


band_instances = st.builds(
    BandInstance,
    m=st.integers(1, 64), n=st.integers(1, 64), batch=st.integers(1, 3),
    log10_cond=st.floats(0.0, 6.0), log10_scale=st.floats(-6.0, 6.0),
    kind=st.sampled_from(["loguniform", "geometric", "spike"]),
    dtype=st.sampled_from(["float64", "float32", "bfloat16"]),
    seed=st.integers(0, 2**16),
)

tight_instances = st.builds(
    TightInstance, tau=st.integers(0, 8), eta=log_uniform(-3, 0), L=log_uniform(-2, 2),
    periods=st.integers(1, 3),
)


def check(records: Record | list[Record], description: str = "") -> None:
    """Add the records to the report and assert each holds (the message names the instance)."""
    recs = records if isinstance(records, list) else [records]
    for r in recs:
        if description:
            REPORT.describe(r.prop, description)
        REPORT.add(r)
    bad = [r for r in recs if not r.passed]
    assert not bad, "property violated:\n" + "\n".join(
        f"  {r.prop}: measured={r.measured!r} bound={r.bound!r} ratio={r.ratio:.6g} "
        f"params={r.params} extra={ {k: v for k, v in r.extra.items() if k != 'orbit'} }"
        for r in bad)
