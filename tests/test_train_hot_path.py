"""The trainer's hot path reads nothing from the device: the loss and gradient norm stay on the
device and are fetched once per ``train.log_every`` steps (plus once per drain). Counted, not
assumed: every host read of a tensor (``item``, ``tolist``, ``float``, ``bool``, ``int``,
``cpu``, ``numpy``) made from asyncpp's own source is counted during a real single-process run
of the demo schedule (2BW, P = 2, m = 2, Muon + EF, global clipping)."""

from __future__ import annotations

import collections
import functools
import linecache
import sys

import pytest
import torch

from asyncpp.train import cli
from asyncpp.train.components import to_device

READS = ("item", "tolist", "__float__", "__bool__", "__int__", "cpu", "numpy")


@pytest.fixture
def counted(monkeypatch):
    counts: collections.Counter = collections.Counter()
    for name in READS:
        orig = getattr(torch.Tensor, name)

        def f(self, *a, _orig=orig, _name=name, **k):
            fr = sys._getframe(1)
            fn = fr.f_code.co_filename
            # The optimizers' step counters live on the CPU (see test_step_counters_stay_...):
            # reading them is not a device synchronisation.
            if "/asyncpp/" in fn and 'state["step"]' not in linecache.getline(fn, fr.f_lineno):
                counts[f"{fn.split('/asyncpp/')[-1]}:{fr.f_lineno}:{_name}"] += 1
            return _orig(self, *a, **k)

        monkeypatch.setattr(torch.Tensor, name, functools.wraps(orig)(f))
    return counts


def _run(steps: int, tmp_path, cache, log_every: int = 10) -> int:
    rc = cli.main(["--config", "configs/demo.toml", "--model.name", "tiny", "--train.steps",
                   str(steps), "--train.eval_every", "0", "--train.log_every", str(log_every),
                   "--data.max_documents", "60", "--data.seq_len", "16",
                   "--train.batch_size", "4", "--data.cache_dir", str(cache),
                   "--log.progress", "false", "--log.plot", "false", "--log.tensorboard", "off",
                   "--run.dir", str(tmp_path / f"run-{steps}"), "--run.threads", "1"])
    assert rc == 0



@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    return tmp_path_factory.mktemp("asyncpp-cache")


def test_host_reads_are_once_per_log_interval(counted, tmp_path, cache, monkeypatch):
    monkeypatch.chdir(__import__("pathlib").Path(__file__).resolve().parents[1])
    _run(20, tmp_path, cache)
    short = dict(counted)
    counted.clear()
    _run(40, tmp_path, cache)
    extra = {k: v - short.get(k, 0) for k, v in counted.items() if v != short.get(k, 0)}
    # 20 more steps at log_every = 10: two more fetches, nothing per step.
    assert sum(extra.values()) <= 2, extra


def test_step_counters_stay_on_the_cpu_across_resume():
    state = {"state": {0: {"step": torch.tensor(3.0), "exp_avg": torch.zeros(2)}},
             "param_groups": [{"lr": 0.1}]}
    moved = to_device(state, torch.device("meta"))
    assert moved["state"][0]["step"].device.type == "cpu"
    assert moved["state"][0]["exp_avg"].device.type == "meta"
