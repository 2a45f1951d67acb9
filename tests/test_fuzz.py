"""Property-based fuzzing (hypothesis; bounded and derandomized, so CI is reproducible):

- the config parser: any TOML-ish text, any nested table, any dotted override gives a valid
  :class:`Config` or a one-line :class:`ConfigError` — never another exception; through the CLI
  (``--print-config``, so nothing trains) exit 0 or 2, never a traceback;
- the schedule builder: for any schedule, P, m, T (small), every microbatch of every step is
  forwarded and backwarded exactly once per stage, backward after forward on the same version,
  sends match receives one to one, updates follow their backwards, and the simulated
  execution terminates having run every action.
"""

from __future__ import annotations

import contextlib
import dataclasses
import io
from collections import Counter

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from asyncpp.pipeline.actions import BackwardInput, BackwardWeight
from asyncpp.pipeline.registry import get_spec
from asyncpp.pipeline.schedules import (
    SCHEDULES,
    Backward,
    Forward,
    OptimizerStep,
    Recv,
    Send,
    build,
)
from asyncpp.pipeline.simulator import simulate
from asyncpp.train.config import (
    SECTIONS,
    Config,
    ConfigError,
    from_dict,
    merge,
    parse_overrides,
    read_toml,
    validate,
)

FUZZ = settings(max_examples=100, derandomize=True, deadline=None, database=None,
                suppress_health_check=list(HealthCheck))

KEYS = [(s, f.name) for s, cls in SECTIONS.items() for f in dataclasses.fields(cls)]
NAMES = st.sampled_from([k for _, k in KEYS]) | st.text(min_size=0, max_size=8)
SECTION_NAMES = st.sampled_from(list(SECTIONS)) | st.text(max_size=8)
SCALARS = (st.none() | st.booleans() | st.integers() | st.integers(-2**70, 2**70)
           | st.sampled_from([2**63, -2**63, 10**400, 2**64 + 1])
           | st.floats(allow_nan=True, allow_infinity=True) | st.text(max_size=12)
           | st.sampled_from(["muon", "2bw", "ef", "none", "gpipe", "bible", "files", "cpu",
                              "cuda:0", "auto", "tiny", "moe-tiny", "shards", ""]))
VALUES = st.recursive(SCALARS, lambda inner: st.lists(inner, max_size=3)
                      | st.dictionaries(st.text(max_size=5), inner, max_size=3), max_leaves=6)
TABLES = st.dictionaries(SECTION_NAMES, st.dictionaries(NAMES, VALUES, max_size=5) | VALUES,
                         max_size=4)


def _accept_or_config_error(fn, *args):
    """Run ``fn``; a ConfigError must be one line. Anything else propagates (a failure)."""
    try:
        cfg = fn(*args)
    except ConfigError as e:
        msg = str(e)
        assert msg and "\n" not in msg, msg
        return None
    return cfg


def _full(d: dict, world_size=None) -> Config:
    cfg = from_dict(d)
    validate(cfg, world_size=world_size)
    cfg.model_config()
    cfg.stage_delays()
    return cfg


@FUZZ
@given(TABLES, st.none() | st.integers(-2, 9))
@example({"optimizer": {"lr": 10**400}}, None)  # found by this test: OverflowError
@example({"model": {"rope_theta": 2**1100}, "train": {"steps": 10**5000}}, None)
@example({"model": {"dim": 10**30}}, None)  # accepted, then a traceback in torch
def test_any_nested_table_is_a_config_or_a_clean_error(d, world):
    _accept_or_config_error(_full, d, world)


def _toml_value(v) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, str):
        return '"' + v.replace("\\", "\\\\").replace('"', '\\"') + '"'
    return repr(v)


LINE = st.one_of(
    SECTION_NAMES.map(lambda s: f"[{s}]"),
    st.tuples(NAMES, SCALARS.filter(lambda v: v is not None)).map(
        lambda kv: f"{kv[0]} = {_toml_value(kv[1])}"),
    st.tuples(NAMES, st.text(max_size=10)).map(lambda kv: f"{kv[0]} = {kv[1]}"),
    st.text(max_size=20),
)


@FUZZ
@given(st.lists(LINE | st.just("x = " + "9" * 5000), max_size=10).map("\n".join)
       | st.text(max_size=80) | st.binary(max_size=40))
@example("[train]\nsteps = " + "9" * 5000)  # found by this test: tomllib's ValueError
@example(b"\xff\xfe[run]")
def test_any_toml_ish_text_is_a_config_or_a_clean_error(tmp_path_factory, text):
    f = tmp_path_factory.mktemp("toml") / "c.toml"
    f.write_bytes(text if isinstance(text, bytes) else text.encode("utf-8", "surrogatepass"))
    _accept_or_config_error(lambda: _full(read_toml(f)))


OVERRIDE_KEYS = (st.sampled_from([f"{s}.{k}" for s, k in KEYS])
                 | st.text(max_size=12) | st.tuples(SECTION_NAMES, NAMES).map(".".join))
OVERRIDE_TEXT = (st.text(max_size=12) | st.integers().map(str) | st.floats().map(repr)
                 | st.sampled_from(["true", "no", "1e400", "-0", "nan", "inf", "9" * 5000,
                                    "0x10", "1_000", " 3 ", "muon", "2bw"]))


@FUZZ
@given(TABLES, st.lists(st.tuples(OVERRIDE_KEYS, OVERRIDE_TEXT), max_size=6))
def test_any_dotted_overrides_are_a_config_or_a_clean_error(base, pairs):
    _accept_or_config_error(lambda: _full(merge(base, parse_overrides(pairs))))


@settings(max_examples=60, derandomize=True, deadline=None, database=None,
          suppress_health_check=list(HealthCheck))
@given(st.lists(st.tuples(OVERRIDE_KEYS, OVERRIDE_TEXT), max_size=5),
       st.lists(LINE, max_size=6).map("\n".join) | st.binary(max_size=40))
@example([("train.steps", "2")], "train = 3")  # found: the override silently replaced it
def test_cli_never_shows_a_traceback(tmp_path_factory, pairs, toml_text):
    """The real entry point: exit 0 (printed config) or 2 (one line), writing nothing."""
    from asyncpp.train import cli

    d = tmp_path_factory.mktemp("fuzz")
    f = d / "c.toml"
    f.write_bytes(toml_text if isinstance(toml_text, bytes) else toml_text.encode())
    argv = ["--config", str(f), "--print-config", "--run.dir", str(d / "run")]
    for k, v in pairs:
        argv += [f"--{k}", v]
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        try:
            code = cli.main(argv)
        except SystemExit as e:  # argparse: exit 2 with one line
            code = e.code
    assert code in (0, 2), (argv, err.getvalue())
    if code == 2:
        assert len(err.getvalue().strip().splitlines()) == 1, err.getvalue()
    assert sorted(p.name for p in d.iterdir()) == ["c.toml"]


# -- schedules -----------------------------------------------------------------------------------
SPLIT = ("zb-h1", "zb-v")  # the schedules that split the backward (input, then weight)


@settings(max_examples=300, derandomize=True, deadline=None, database=None,
          suppress_health_check=list(HealthCheck))
@given(st.sampled_from(SCHEDULES), st.integers(1, 5), st.integers(1, 6), st.integers(1, 4),
       st.integers(0, 3), st.none() | st.sets(st.integers(0, 8), max_size=4))
def test_any_schedule_is_complete_matched_and_terminates(name, P, m, T, start, sync):
    sync = sync if name == "2bw" else None
    try:
        sched = build(name, P, m, T, start_step=start, sync_steps=sync)
    except ValueError as e:  # the only refusals: 2BW and WPipe need m >= P - 1, WPipe and
        # ZB-V an even P (the registry's stages_error)
        assert (name in ("2bw", "wpipe") and m < P - 1) or get_spec(name).stages_error(P), e
        return
    steps = range(start, start + T)
    every = Counter((t, i) for t in steps for i in range(m))
    sends, recvs = Counter(), Counter()
    for s, acts in enumerate(sched.actions):
        fwd = Counter((a.step, a.mb) for a in acts if isinstance(a, Forward))
        # a zero-bubble schedule splits each backward into its input and weight halves
        bwd = Counter((a.step, a.mb) for a in acts if isinstance(a, (Backward, BackwardInput)))
        wgt = Counter((a.step, a.mb) for a in acts if isinstance(a, BackwardWeight))
        assert fwd == every and bwd == every, (s, fwd, bwd)  # each exactly once
        assert wgt == (every if name in SPLIT else Counter()), (s, wgt)
        seen_f, seen_b, seen_w, versions = {}, set(), set(), {}
        for a in acts:
            if isinstance(a, Forward):
                seen_f[(a.step, a.mb)] = a.version
            elif isinstance(a, (Backward, BackwardInput)):
                assert seen_f.get((a.step, a.mb)) == a.version  # after its forward, same x
                seen_b.add((a.step, a.mb))
            elif isinstance(a, BackwardWeight):
                assert (a.step, a.mb) in seen_b  # after its input half
                seen_w.add((a.step, a.mb))
            elif isinstance(a, OptimizerStep):
                mbs = range(m) if a.mb is None else [a.mb]
                assert all((a.step, i) in seen_b for i in mbs)
                if name in SPLIT:  # every weight gradient is complete before the update
                    assert all((a.step, i) in seen_w for i in mbs)
                versions[a.update] = a.new_version
            elif isinstance(a, Send):
                assert a.peer == (s + 1 if a.kind == "activation" else s - 1)
                sends[(a.kind, a.step, a.mb, s, a.peer)] += 1
            elif isinstance(a, Recv):
                assert a.peer == (s - 1 if a.kind == "activation" else s + 1)
                recvs[(a.kind, a.step, a.mb, a.peer, s)] += 1
        n_updates = T * m if name == "pipedream" else T
        assert len(versions) == n_updates
    assert sends == recvs and set(sends.values()) <= {1}
    assert len(sends) == 2 * (P - 1) * T * m  # an activation and a gradient per boundary
    res = simulate(sched, t_forward=1.0, t_backward=2.0, t_comm=0.5, t_optimizer=0.1)
    n_compute = sum(1 for acts in sched.actions for a in acts
                    if isinstance(a, (Forward, Backward, BackwardInput, BackwardWeight,
                                      OptimizerStep)))
    assert len(res.intervals) == n_compute and res.makespan > 0
    assert 0.0 <= res.bubble_fraction < 1.0


@pytest.mark.parametrize("bad", [dict(name="zb"), dict(P=0), dict(m=0), dict(T=0),
                                 dict(P=True), dict(m=2.0)])
def test_schedule_builder_refuses_bad_arguments_cleanly(bad):
    args = {"name": "1f1b", "P": 2, "m": 2, "T": 1, **bad}
    with pytest.raises(ValueError):
        build(args["name"], args["P"], args["m"], args["T"])
