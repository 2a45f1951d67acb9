"""The compute-optimal ladder's declarations (experiments/tables_opt.py): 20 tokens per
parameter under one epoch, lr grids that extend past an edge until the optimum is interior,
the claims at each mode's own lr, the transfer rule, PipeDream's equal-updates control, and
the report's regime line — on synthetic result files."""

import json
from pathlib import Path

import pytest

from asyncpp.study.ladder import report_opt, sweep
from asyncpp.study.ladder import tables_opt as to
from asyncpp.train.config import from_dict, merge, parse_overrides, read_toml

EXP = Path(__file__).resolve().parent.parent / "experiments"

CORPUS_TRAIN_TOKENS = 30_332_934  # debdocs-v1 (experiments/gpu/corpus-manifest.json)


def _write(results: Path, cell: str, seed: int, val: float | None, params=180_512,
           tpp=20.0, epochs=0.12):
    results.mkdir(parents=True, exist_ok=True)
    rec = {"cell": cell, "seed": seed, "status": "ok" if val is not None else "diverged",
           "final": {"val_loss": val, "params": params, "tokens_per_param": tpp,
                     "epochs": epochs}}
    (results / f"{cell}-seed{seed}.json").write_text(json.dumps(rec))


@pytest.mark.parametrize("name", ["opt-180k", "opt-580k"])
def test_tiers_are_compute_optimal_and_under_one_epoch(name):
    tier = sweep.get_tier(name)
    cfg = from_dict(merge(read_toml(EXP / "configs" / tier.base),
                          parse_overrides([("pipeline.schedule", "1f1b")])))
    N = cfg.model_config().num_params()
    tokens = cfg.train.steps * cfg.train.batch_size * cfg.data.seq_len
    assert cfg.train.steps == tier.steps and cfg.data.seq_len >= 128
    assert 19 <= tokens / N <= 21
    assert tokens < CORPUS_TRAIN_TOKENS  # no training token read twice
    assert cfg.train.val_sample == "spread" and cfg.train.final_eval == "full"


def test_sizes_span_three_times():
    n = [from_dict(merge(read_toml(EXP / "configs" / sweep.get_tier(t).base), parse_overrides(
        [("pipeline.schedule", "1f1b")]))).model_config().num_params()
         for t in ("opt-180k", "opt-580k")]
    assert n[1] / n[0] >= 3


def test_lr_grid_extends_past_an_edge_until_interior(tmp_path):
    tier = sweep.get_tier("opt-180k").at(results=tmp_path)
    assert to.lr_grid(tier, "adamw", "async") == [0.005, 0.01, 0.02]
    assert to.lr_choice(tier, "adamw", "async") is None
    with pytest.raises(ValueError, match="not settled"):
        to.chosen_lr(tier, "adamw", "async")
    # the best of the first grid on its upper edge: one more point above
    for lr, v in ((0.005, 3.9), (0.01, 3.7), (0.02, 3.6)):
        _write(tmp_path, to.lr_cell_name("adamw", "async", lr), 0, v)
    assert to.lr_grid(tier, "adamw", "async") == [0.005, 0.01, 0.02, 0.04]
    with pytest.raises(ValueError, match="not settled"):
        to.chosen_lr(tier, "adamw", "async")
    _write(tmp_path, to.lr_cell_name("adamw", "async", 0.04), 0, None)  # diverged: +inf
    assert to.lr_grid(tier, "adamw", "async") == [0.005, 0.01, 0.02, 0.04]
    assert to.lr_choice(tier, "adamw", "async") == (0.02, True)
    assert to.chosen_lr(tier, "adamw", "async") == 0.02


def test_claims_take_each_modes_lr_and_muon_scales_its_adamw_side(tmp_path):
    tier = sweep.get_tier("opt-180k").at(results=tmp_path)
    for o, m in to.TUNED_MAIN:
        c = to.CENTRE[o]
        for lr, v in ((c / 2, 3.8), (c, 3.5), (2 * c, 3.9 if m == "sync" else 3.4)):
            _write(tmp_path, to.lr_cell_name(o, m, lr), 0, v)
        if m != "sync":  # the asynchronous modes' optimum on the upper edge: extended
            _write(tmp_path, to.lr_cell_name(o, m, 4 * c), 0, 3.6)
    cells = {c.name: c for c in sweep.table_cells("opt-claims", tier)}
    assert len(cells) == 12
    assert cells["adamw-sync"].overrides["optimizer.lr"] == repr(0.01)
    assert cells["adamw-ef"].overrides["optimizer.lr"] == repr(0.02)
    assert cells["adamw-ef"].overrides["delay.correction"] == "ef"
    assert cells["soap-efg"].overrides["delay.ef_gamma"] == "auto"
    muon = cells["muon-async"].overrides
    assert float(muon["optimizer.adamw_lr"]) == pytest.approx(3e-3 * 2)
    # seed 0 of a claims cell is the tuning run at the chosen lr: the same configuration
    tune = {c.name: c for c in sweep.table_cells("opt-lr", tier)}["lr-adamw-ef-0.02"]
    assert {k: v for k, v in tune.overrides.items()} == cells["adamw-ef"].overrides


def test_tables_list_the_settled_pairs_and_grow_with_them(tmp_path):
    """A claims lane need not wait for every grid: the cells of the settled (optimizer, mode)
    pairs are listed, the others appear once theirs settle; a larger tier's grids likewise
    appear pair by pair as the smaller tier's settle."""
    tier = sweep.get_tier("opt-180k").at(results=tmp_path)
    assert sweep.table_cells("opt-claims", tier) == []
    assert sweep.table_cells("opt-more", tier) == []
    for lr, v in ((0.005, 3.8), (0.01, 3.5), (0.02, 3.9)):
        _write(tmp_path, to.lr_cell_name("adamw", "sync", lr), 0, v)
    assert [c.name for c in sweep.table_cells("opt-claims", tier)] == ["adamw-sync"]
    assert {c.name for c in sweep.table_cells("opt-tokens", tier)} == {
        f"adamw-sync-tpp{k}" for k in to.TOKEN_LADDER}
    big = sweep.get_tier("opt-580k").at(results=tmp_path / "big")
    with pytest.MonkeyPatch.context() as mp:
        mp.setitem(sweep.TIERS, "opt-180k", tier)
        assert {c.name for c in sweep.table_cells("opt-lr", big)} == {
            to.lr_cell_name("adamw", "sync", lr) for lr in (0.005, 0.01, 0.02)}


def test_pipedream_equal_updates_control_matches_2bw(tmp_path):
    tier = sweep.get_tier("opt-180k").at(results=tmp_path)
    for o, m in to.TUNED_MAIN + to.TUNED_MORE:
        c = to.CENTRE[o]
        for lr, v in ((c / 2, 3.8), (c, 3.5), (2 * c, 3.9)):
            _write(tmp_path, to.lr_cell_name(o, m, lr), 0, v)
    cells = {c.name: c for c in sweep.table_cells("opt-more", tier)}
    pd, eq, bw = (cells[f"adamw-{k}"].overrides for k in ("pipedream-P4", "pipedream-P4-equal",
                                                         "async-P4"))
    S, B = int(bw["train.steps"]), 16
    # one model for the three: untied (PipeDream cannot update a tied embedding and head),
    # at 20 tokens per parameter of it
    assert pd["model.tie_embeddings"] == eq["model.tie_embeddings"] == \
        bw["model.tie_embeddings"] == "false"
    assert pd["train.steps"] == bw["train.steps"] == str(to.steps_at(tier, 20, **to.UNTIED))
    # PipeDream updates once per microbatch (2 per step): S*2 updates of B/2 sequences; the
    # control: S/2 steps of 2B sequences in 2 microbatches = S updates of B, as 2BW makes
    updates = {"pd": 2 * S, "eq": 2 * int(eq["train.steps"]), "2bw": S}
    per_update = {"pd": B // 2, "eq": int(eq["train.batch_size"]) // 2, "2bw": B}
    assert abs(updates["eq"] - updates["2bw"]) <= 1 and per_update["eq"] == per_update["2bw"]
    assert updates["pd"] == 2 * updates["2bw"] and per_update["pd"] == B // 2
    assert pd["pipeline.stages"] == eq["pipeline.stages"] == bw["pipeline.stages"] == "4"
    assert {cells[f"{o}-{k}"].overrides["optimizer.lr"] for o in ("adamw",)
            for k in ("pipedream-P4", "syncstart", "cooldown")} == {repr(0.01)}


def test_every_ladder_cell_is_a_valid_configuration(tmp_path):
    """Each declared cell builds the configuration asyncpp-train validates (a PipeDream cell
    with a tied embedding and head is refused there, and would stop a lane)."""
    tier = sweep.get_tier("opt-180k").at(results=tmp_path)
    for o, m in to.TUNED_MAIN + to.TUNED_MORE:
        c = to.CENTRE[o]
        for lr, v in ((c / 2, 3.8), (c, 3.5), (2 * c, 3.9)):
            _write(tmp_path, to.lr_cell_name(o, m, lr), 0, v)
    from asyncpp.train.config import validate

    n = 0
    for table in ("opt-lr", "opt-claims", "opt-more", "opt-tokens"):
        for cell in sweep.table_cells(table, tier):
            cfg, _ = sweep.build_config(cell, 0, tmp_path / "run", None, {})
            validate(cfg)
            n += 1
    assert n > 100


def test_token_ladder_stays_under_one_epoch():
    tier = sweep.get_tier("opt-180k")
    for k in to.TOKEN_LADDER:
        S = to.steps_at(tier, k)
        assert S * 16 * 128 < CORPUS_TRAIN_TOKENS
        assert abs(S * 2048 / 180_512 - k) < 0.01


def test_larger_tier_transfers_the_smaller_tiers_lr(tmp_path, monkeypatch):
    small = sweep.get_tier("opt-180k").at(results=tmp_path / "small")
    monkeypatch.setitem(sweep.TIERS, "opt-180k", small)
    big = sweep.get_tier("opt-580k").at(results=tmp_path / "big")
    with pytest.raises(ValueError, match="transfers from opt-180k"):
        to.lr_grid(big, "muon", "sync")
    for lr, v in ((0.01, 3.8), (0.02, 3.5), (0.04, 3.9)):
        _write(tmp_path / "small", to.lr_cell_name("muon", "sync", lr), 0, v)
    assert to.lr_grid(big, "muon", "sync") == [0.01, 0.02, 0.04]
    # the larger tier's lr table: the settled pair's grid, a plain "not yet" for the others
    lines, _ = report_opt.section_lr({}, big)
    text = "\n".join(lines)
    rows = {ln.split("|")[1].strip() + "/" + ln.split("|")[2].strip(): ln
            for ln in text.splitlines() if ln.startswith("| Muon") or ln.startswith("| AdamW")}
    assert "0.01: —, 0.02: —, 0.04: —" in rows["Muon/synchronous (1F1B)"]
    assert "not yet: transfers from `opt-180k`" in rows["AdamW/synchronous (1F1B)"]
    assert "sweep.py" not in text
    assert rows["Muon/synchronous (1F1B)"].rstrip().endswith("| — | 0.02 |")
    assert "none has settled yet" in text
    # the larger tier's grid settles 4× below the transferred lr*: a ÷4 move, said once
    for lr, v in ((0.01, 3.4), (0.02, 3.45), (0.04, 3.6), (0.005, 3.3), (0.0025, 3.35)):
        _write(tmp_path / "big", to.lr_cell_name("muon", "sync", lr), 0, v)
    R = {to.lr_cell_name("muon", "sync", lr): {0: {"status": "ok", "final": {"val_loss": v}}}
         for lr, v in ((0.01, 3.4), (0.02, 3.45), (0.04, 3.6), (0.005, 3.3), (0.0025, 3.35))}
    text = "\n".join(report_opt.section_lr(R, big)[0])
    assert "| 0.005 | 0.02 (÷4) |" in text
    assert "Of the 1 settled pair, 0 kept that lr*; 1 moved: Muon synchronous (1F1B) " \
        "÷4." in text


def test_report_states_the_regime():
    R = {"a": {0: {"status": "ok", "final": {"params": 180_512, "tokens_per_param": 20.002,
                                              "epochs": 0.1234}}}}
    assert report_opt.regime(R) == "180,512 parameters, 20 tokens/parameter, 0.123 epochs"
    assert report_opt.regime({}) == "no finished runs yet"


def test_soap_keeps_the_vocabulary_side_one_sided_as_at_the_papers_vocabulary(tmp_path):
    """The paper's 49,152-token vocabulary exceeds SOAP's default max_precondition_dim, so its
    SOAP preconditions every side but the vocabulary's; the ladder's SOAP cells reproduce that
    split at a 4,096-token vocabulary, and the other optimizers' cells carry no SOAP key."""
    tier = sweep.get_tier("opt-180k").at(results=tmp_path)
    for o, m in to.TUNED_MAIN:
        c = to.CENTRE[o]
        for lr, v in ((c / 2, 3.8), (c, 3.5), (2 * c, 3.9)):
            _write(tmp_path, to.lr_cell_name(o, m, lr), 0, v)
    key = "optimizer.soap_max_precondition_dim"
    for table in ("opt-lr", "opt-claims"):
        for cell in sweep.table_cells(table, tier):
            assert (key in cell.overrides) == (cell.opt == "soap"), cell.name
            if cell.opt == "soap":
                cfg, _ = sweep.build_config(cell, 0, tmp_path / "run", None, {})
                mc = cfg.model_config()
                limit = cfg.optimizer.soap_max_precondition_dim
                sides = {mc.dim, mc.ffn_dim, mc.n_heads * mc.head_dim,
                         mc.n_kv_heads * mc.head_dim}
                assert mc.vocab_size > limit >= max(sides)


def test_a_run_recorded_before_a_field_existed_is_still_found_identical(tmp_path):
    """A field added since a run was recorded takes its default (the old behaviour), so the
    claims cell at seed 0 reuses its tuning run rather than training it again; a difference
    in a training field, or a field that no longer exists, matches nothing."""
    from asyncpp.train.config import load_config

    cfg = load_config(str(sweep.CONFIGS / "opt-180k.toml"), [("optimizer.name", "muon"),
                                                             ("pipeline.schedule", "1f1b")])
    now = cfg.resolved().to_dict()
    old = json.loads(json.dumps(now))
    del old["optimizer"]["soap_max_precondition_dim"]
    tmp_path.mkdir(exist_ok=True)
    (tmp_path / "old-seed0.json").write_text(json.dumps({"status": "ok", "config": old}))
    assert sweep.find_identical(tmp_path, now) == tmp_path / "old-seed0.json"
    other = json.loads(json.dumps(now))
    other["optimizer"]["lr"] = 0.5
    assert sweep.find_identical(tmp_path, other) is None
    gone = json.loads(json.dumps(old))
    gone["optimizer"]["a_field_since_removed"] = 1
    (tmp_path / "old-seed0.json").write_text(json.dumps({"status": "ok", "config": gone}))
    assert sweep.find_identical(tmp_path, now) is None


def test_claims_section_gives_no_share_of_a_gap_within_noise(tmp_path):
    """tables.md, like the front page, states EF's share only of a gap whose interval excludes
    zero; a gap within noise gets 'no share' beside EF's own difference to 2BW."""
    vals = {"sync": (4.00, 4.02, 3.99), "async": (4.03, 4.00, 4.00),
            "ef": (3.97, 3.95, 3.96), "efg": (3.98, 3.96, 3.97)}
    for m, vs in vals.items():
        for seed, v in enumerate(vs):
            _write(tmp_path, f"muon-{m}", seed, v)
    R = report_opt.rc.load_results(tmp_path)
    line = report_opt._share_line(R, "muon")
    assert "no share (the gap is within noise" in line and "%" not in line
    assert "better" in line  # EF's difference to 2BW is still given, with its verdict
    for m, vs in (("async", (4.20, 4.23, 4.19)),):
        for seed, v in enumerate(vs):
            _write(tmp_path, f"muon-{m}", seed, v)
    line = report_opt._share_line(report_opt.rc.load_results(tmp_path), "muon")
    assert "recovers" in line and "%" in line


def test_a_single_seed_gap_gets_no_share_and_is_not_called_within_noise(tmp_path):
    """One paired seed has no interval: the share line says so ("too few seeds"), neither
    stating a share of one seed nor calling a gap of +0.19 "within noise"."""
    for m, v in {"sync": 3.355, "async": 3.544, "ef": 3.451, "efg": 3.453}.items():
        _write(tmp_path, f"adamw-{m}", 0, v)
    R = report_opt.rc.load_results(tmp_path)
    line = report_opt._share_line(R, "adamw")
    assert "no share yet (too few seeds)" in line and "within noise" not in line
    assert "%" not in line
    assert report_opt.rc.no_share_reason(R, "adamw-sync", "adamw-async") == "too few seeds"
    assert report_opt.rc.no_share_reason(R, "adamw-sync", "adamw-none") == "no gap yet"


def _stub_python(tmp_path, body: str):
    """An executable standing in for the interpreter a lane calls (``PYTHON``): bash ``body``."""
    stub = tmp_path / "python"
    stub.write_text("#!/usr/bin/env bash\n" + body)
    stub.chmod(0o755)
    return stub


def test_a_lane_logged_to_a_file_keeps_every_tables_output(tmp_path):
    """``nohup bash experiments/ladder.sh … > log 2>&1`` (the documented launch): the log holds
    each table's sweep output in order, none overwritten by the next table's, and the closing
    line. The sweep is a stub that prints what sweep.py prints when nothing is left to train."""
    import subprocess

    stub = _stub_python(tmp_path, 'echo "sweep of table $5: every cell done"\n'
                        'echo "sweep done: 0 trained"\n')
    log = tmp_path / "lane.log"
    env = {"PATH": "/usr/bin:/bin", "PYTHON": str(stub), "LADDER_WORKTREE": "1"}
    with log.open("w") as f:
        rc = subprocess.run(["bash", str(EXP / "ladder.sh"), "opt-180k", "opt-lr", "opt-claims"],
                            stdout=f, stderr=subprocess.STDOUT, env=env, timeout=60).returncode
    text = log.read_text()
    assert rc == 0, text
    first = text.index("sweep of table opt-lr: every cell done")
    assert first < text.index("sweep of table opt-claims: every cell done")
    assert text.rstrip().endswith("nothing left to train")
    assert "\0" not in text  # no hole left where a truncated log was written past its end


def test_a_lane_with_a_deadline_stops_at_it_and_says_so(tmp_path):
    """sweep.py's ``--deadline`` refusal ends the lane with its own line, before the next
    table, instead of "settled" (which would tell the reader nothing is left to train)."""
    import subprocess

    stub = _stub_python(tmp_path, 'echo "sweep of table $5"\n'
                        'echo "stop: lr-muon-sync-0.08-seed0 would end after the deadline (a run '
                        'takes ~950 s, 300 s left)"\necho "sweep done: 0 runs this invocation"\n')
    env = {"PATH": "/usr/bin:/bin", "PYTHON": str(stub), "LADDER_WORKTREE": "1"}
    done = subprocess.run(["bash", str(EXP / "ladder.sh"), "opt-580k", "opt-lr", "opt-claims",
                           "--", "--deadline", "1"], capture_output=True, text=True, env=env,
                          timeout=60)
    assert done.returncode == 0, done.stderr
    assert "stopped at the deadline" in done.stdout and "settled" not in done.stdout
    assert "sweep of table opt-lr" in done.stderr and "opt-claims" not in done.stderr


def test_a_lane_that_cannot_read_its_tables_fails_and_says_so(tmp_path):
    """A lane named no tables reads the tier's own from sweep.py; when that read fails (here the
    interpreter exits 1 as a missing module would make it) the lane stops non-zero with its
    reason, never "settled" with nothing trained (a lane that raced a half-written worktree
    said exactly that)."""
    import subprocess

    stub = _stub_python(tmp_path, 'if [ "$1" = -c ]; then echo "ModuleNotFoundError: No module'
                        ' named sweep" >&2; exit 1; fi\necho "sweep done: 0 trained"\n')
    env = {"PATH": "/usr/bin:/bin", "PYTHON": str(stub), "LADDER_WORKTREE": "1"}
    done = subprocess.run(["bash", str(EXP / "ladder.sh"), "opt-180k"], capture_output=True,
                          text=True, env=env, timeout=60)
    assert done.returncode != 0
    assert "cannot read the tables of opt-180k" in done.stdout
    assert "settled" not in done.stdout


def _head(repo) -> str:
    import subprocess

    return subprocess.run(["git", "-C", str(repo), "rev-parse", "HEAD"], capture_output=True,
                          text=True, check=True).stdout.strip()


def _clone_with_this_ladder(tmp_path):
    """A fresh clone of this repository whose HEAD commits the ladder.sh under test (a lane
    checks out its commit), and the environment of a lane run from it: its worktrees go under
    ``tmp_path`` and its interpreter is a stub that fails unless the worktree holds sweep.py."""
    import shutil
    import subprocess

    clone = tmp_path / "clone"
    subprocess.run(["git", "clone", "-q", "--no-hardlinks", str(EXP.parent), str(clone)],
                   check=True)
    shutil.copy(EXP / "ladder.sh", clone / "experiments" / "ladder.sh")
    subprocess.run(["git", "-C", str(clone), "-c", "user.name=t", "-c", "user.email=t@t",
                    "commit", "-q", "--allow-empty", "-m", "ladder.sh under test", "--",
                    "experiments/ladder.sh"], check=True)
    stub = _stub_python(tmp_path, '[ -f "$PYTHONPATH/../experiments/sweep.py" ] || {'
                        ' echo "no sweep.py" >&2; exit 1; }\necho "sweep done: 0 trained"\n')
    env = {"PATH": "/usr/bin:/bin", "PYTHON": str(stub), "TMPDIR": str(tmp_path),
           "HOME": str(tmp_path)}
    return clone, env


def test_two_lanes_started_together_share_one_whole_worktree(tmp_path):
    """Two lanes launched at the same moment from a fresh clone: both find the worktree of the
    commit checked out whole (the stub interpreter fails unless sweep.py is there), and both
    run their tables."""
    import subprocess

    clone, env = _clone_with_this_ladder(tmp_path)
    lanes = [subprocess.Popen(["bash", str(clone / "experiments" / "ladder.sh"), "opt-180k",
                               "opt-lr"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              text=True, env=env) for _ in range(2)]
    outs = [lane.communicate(timeout=120)[0] for lane in lanes]
    for lane, out in zip(lanes, outs):
        assert lane.returncode == 0, out
        assert out.rstrip().endswith("nothing left to train"), out
    assert [w.name for w in tmp_path.glob("asyncpp-lane-*")] == [
        f"asyncpp-lane-{_head(clone)[:12]}"]  # one worktree, and no lock file left beside it


def test_a_worktree_left_half_made_by_a_killed_lane_is_made_again(tmp_path):
    """A lane killed while ``git worktree add`` filled the folder leaves its .git file but not
    the tree: the next lane must not train from it. Here the half-made worktree is the
    commit's, registered with git, with sweep.py missing and no mark of a finished checkout."""
    import subprocess

    clone, env = _clone_with_this_ladder(tmp_path)
    wt = tmp_path / f"asyncpp-lane-{_head(clone)[:12]}"
    subprocess.run(["git", "-C", str(clone), "worktree", "add", "-q", "--detach", str(wt),
                    "HEAD"], check=True)
    (wt / "experiments" / "sweep.py").unlink()
    lane = subprocess.run(["bash", str(clone / "experiments" / "ladder.sh"), "opt-180k",
                           "opt-lr"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                          env=env, timeout=120)
    out = lane.stdout
    assert lane.returncode == 0, out
    assert "is not a whole checkout" in out, out
    assert out.rstrip().endswith("nothing left to train"), out
    assert (wt / "experiments" / "sweep.py").is_file()
    # the mark is made once the checkout is whole, so a second lane takes it as it is
    again = subprocess.run(["bash", str(clone / "experiments" / "ladder.sh"), "opt-180k",
                            "opt-lr"], capture_output=True, text=True, env=env, timeout=120)
    assert again.returncode == 0 and "not a whole checkout" not in again.stdout, again.stdout


def test_after_each_run_the_lane_goes_back_to_the_first_table(tmp_path):
    """A lane trains one run per sweep call and then starts its pass again at the first table,
    so a grid point that a finished run unlocked is trained before the next seed of a later
    table. The stub sweep trains one opt-lr run on its first call and two opt-claims runs."""
    import subprocess

    stub = _stub_python(tmp_path, 'f="$(dirname "$0")/$5.n"; n=$(( $(cat "$f" 2>/dev/null'
                        ' || echo 0) + 1 )); echo $n > "$f"\n'
                        'echo "$5 $*" >> "$(dirname "$0")/calls"\n'
                        'case "$5:$n" in opt-lr:1|opt-claims:1|opt-claims:2)'
                        ' echo "sweep done: 1 runs this invocation";;\n'
                        '  *) echo "sweep done: 0 runs this invocation";; esac\n')
    env = {"PATH": "/usr/bin:/bin", "PYTHON": str(stub), "LADDER_WORKTREE": "1"}
    done = subprocess.run(["bash", str(EXP / "ladder.sh"), "opt-180k", "opt-lr", "opt-claims"],
                          capture_output=True, text=True, env=env, timeout=60)
    assert done.returncode == 0, done.stderr
    assert "nothing left to train" in done.stdout
    calls = (tmp_path / "calls").read_text().splitlines()
    assert [c.split()[0] for c in calls] == ["opt-lr", "opt-lr", "opt-claims", "opt-lr",
                                             "opt-claims", "opt-lr", "opt-claims"]
    assert all("--max-runs 1" in c for c in calls)


def test_each_section_states_the_regime_of_its_own_runs(tmp_path):
    """The lr section's regime is its grids' (20 tokens/parameter), not widened to "5–20" by
    a token-ladder run, nor to a range of parameters by the untied P = 4 runs of opt-more."""
    def rec(params, tpp, epochs):
        return {0: {"status": "ok", "final": {"val_loss": 4.0, "params": params,
                                              "tokens_per_param": tpp, "epochs": epochs}}}

    R = {to.lr_cell_name("muon", "sync", 0.16): rec(180_512, 20.0, 0.12),
         "muon-sync-tpp5": rec(180_512, 5.0, 0.03),
         "muon-async-P4": rec(311_584, 20.0, 0.206)}
    tier = sweep.get_tier("opt-180k")
    lines, _ = report_opt.section_lr(R, tier)
    assert "Regime: 180,512 parameters, 20 tokens/parameter, 0.12 epochs." in "\n".join(lines)


def test_the_ladders_verdicts_wait_for_three_seeds():
    """The ladder's rule gives a verdict only on ≥ 3 seeds: with two seeds whose interval
    already excludes zero the zero-gap row reads "pending (2 of 3 seeds)", with the third its
    verdict; the short-training tiers keep theirs at two."""
    from asyncpp.study.ladder import report_zero_gap as zg

    def R_of(n):
        val = {"muon-sync": 3.30, "muon-ef": 3.40}
        return {c: {s: {"status": "ok", "final": {"val_loss": v + 0.001 * s}} for s in range(n)}
                for c, v in val.items()}

    assert zg.min_seeds_of("opt-580k") == 3 and zg.min_seeds_of("gpu") == 3
    assert zg.min_seeds_of("tiny") == 2
    assert "| pending (2 of 3 seeds) |" in zg.table_zero_gap(R_of(2), min_seeds=3)
    assert "| worse |" in zg.table_zero_gap(R_of(2))
    assert "| worse |" in zg.table_zero_gap(R_of(3), min_seeds=3)
    # nor does the share line call a 2-seed gap "within noise": it waits as the verdict does
    from asyncpp.study.ladder import report_common as rc

    R = R_of(2)
    R["muon-async"] = {s: {"status": "ok", "final": {"val_loss": 3.5 - 0.3 * s}} for s in (0, 1)}
    assert rc.no_share_reason(R, "muon-sync", "muon-async") == "within noise"
    assert rc.no_share_reason(R, "muon-sync", "muon-async", 3) == "2 of 3 seeds"
    # and the ladder's own claims section applies the rule of its tier
    text = "\n".join(report_opt.section_claims(R_of(2), sweep.get_tier("opt-580k"))[0])
    assert "| 2BW + EF | 3.401 ± 0.001 | +0.100 ± 0.000 | [+0.100, +0.100] | 2/2 | pending (2 " \
        "of 3 seeds) |" in text


def test_scaling_figure_ticks_name_the_measured_points(tmp_path, monkeypatch):
    """The token figure's x ticks are the lengths that ran, written plainly (5, 20, 80), and
    the size figure's are the parameter counts ("181k"), not the log locator's "2×10¹"."""
    import matplotlib.pyplot as plt

    shown = []
    real_close = plt.close
    monkeypatch.setattr(plt, "close", lambda fig: (shown.append(
        [t.get_text() for t in fig.axes[0].get_xticklabels()]), real_close(fig)))
    p = report_opt.stats.paired({0: 0.2, 1: 0.3}, {0: 0.1, 1: 0.1})
    path = report_opt._plot({"Muon": [(5, p), (20, p), (80, p)]}, "tokens per parameter",
                            tmp_path / "t.png")
    assert path.stat().st_size > 0 and shown[-1] == ["5", "20", "80"]
    report_opt._plot({"Muon": [(180_512, p), (582_208, p), (1_260_000, p)]}, "parameters",
                     tmp_path / "p.png")
    assert shown[-1] == ["181k", "582k", "1.26M"]


def test_token_table_gives_no_share_of_a_gap_within_noise(tmp_path):
    """The token ladder's table keeps the claims tables' rule: at 20 tokens/parameter Muon's
    gap holds zero (no share), at 10 it is clear of zero (a share), at 40 one seed (none)."""
    runs = {"": {"sync": (4.00, 4.02), "async": (4.03, 4.00), "ef": (3.97, 3.95)},
            "-tpp10": {"sync": (4.40, 4.42), "async": (4.60, 4.61), "ef": (4.50, 4.52)},
            "-tpp40": {"sync": (4.0,), "async": (4.1,), "ef": (4.05,)}}
    for suffix, cells in runs.items():
        for m, vs in cells.items():
            for seed, v in enumerate(vs):
                _write(tmp_path, f"muon-{m}{suffix}", seed, v)
    tier = sweep.get_tier("opt-180k").at(results=tmp_path, root=tmp_path)
    lines, _ = report_opt.section_tokens(report_opt.rc.load_results(tmp_path), tier)
    row = {r.split("|")[2].strip(): r for r in "\n".join(lines).splitlines()
           if r.startswith("| Muon |")}
    assert "— (gap within noise)" in row["20"] and "%" not in row["20"]
    # on the seed means, 0.095 / 0.195, with Fieller's interval as every share is stated
    from asyncpp.study import stats as study_stats
    sh = study_stats.fieller_share({0: 4.60, 1: 4.61}, {0: 4.50, 1: 4.52}, {0: 4.40, 1: 4.42})
    assert f"49 % [{100 * sh.lo:.0f}, {100 * sh.hi:.0f}]" in row["10"]
    assert "— (too few seeds)" in row["40"]
