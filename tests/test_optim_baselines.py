"""SOAP, Adan, Lion, MARS against their defining equations (asyncpp.optim.baselines docstring).

Each reference below is a few lines of numpy written from the paper's update rule, run for 2–4
steps on a tiny float64 tensor with fixed gradients, and compared with the optimizer that
``build_optimizer`` returns.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from asyncpp.optim import build_optimizer
from asyncpp.optim.baselines import build

pytestmark = pytest.mark.usefixtures("one_thread")

RNG = np.random.default_rng(0)
X0 = RNG.standard_normal((3, 2))
GRADS = [RNG.standard_normal((3, 2)) * s for s in (0.3, 2.0, 0.5, 1.5)]


def _run(name, steps, x0=X0, grads=GRADS, **hp):
    """The optimizer's trajectory (list of numpy arrays after each step)."""
    p = torch.nn.Parameter(torch.tensor(x0, dtype=torch.float64))
    opt = build_optimizer(name, [("w", p)], **hp)
    out = []
    for g in grads[:steps]:
        p.grad = torch.tensor(g, dtype=torch.float64)
        opt.step()
        out.append(p.detach().numpy().copy())
    return out


def _close(got, expected, rtol=1e-12, atol=1e-14):
    for t, (a, b) in enumerate(zip(got, expected)):
        np.testing.assert_allclose(a, b, rtol=rtol, atol=atol, err_msg=f"step {t + 1}")


def test_lion_program_1():
    lr, b1, b2, wd = 0.01, 0.8, 0.9, 0.3
    x, m, expected = X0.copy(), np.zeros_like(X0), []
    for g in GRADS[:3]:
        c = np.sign(b1 * m + (1 - b1) * g)
        x = (1 - lr * wd) * x - lr * c
        m = b2 * m + (1 - b2) * g
        expected.append(x.copy())
    _close(_run("lion", 3, lr=lr, momentum=b1, betas=(0.0, b2), weight_decay=wd), expected)


@pytest.mark.parametrize("foreach", [None, False])
def test_adan_algorithm_1(foreach):
    lr, (b1, b2, b3), eps, wd = 0.01, (0.7, 0.8, 0.9), 1e-8, 0.2
    x, expected = X0.copy(), []
    m, v, n = (np.zeros_like(X0) for _ in range(3))
    g_prev = None
    for t, g in enumerate(GRADS[:3], start=1):
        d = np.zeros_like(g) if g_prev is None else g - g_prev  # g_0 := g_1
        m = b1 * m + (1 - b1) * g
        v = b2 * v + (1 - b2) * d
        n = b3 * n + (1 - b3) * (g + b2 * d) ** 2
        step = (m / (1 - b1**t) + b2 * v / (1 - b2**t)) / (np.sqrt(n / (1 - b3**t)) + eps)
        x = (x - lr * step) / (1 + lr * wd)  # proximal weight decay, Alg. 1 line 7
        g_prev = g
        expected.append(x.copy())
    got = _run("adan", 3, lr=lr, momentum=b1, betas=(0.0, b2, b3), eps=eps, weight_decay=wd,
               foreach=foreach)
    _close(got, expected)


def test_adan_default_path_leaves_grad_untouched():
    p = torch.nn.Parameter(torch.tensor(X0))
    opt = build("adan", [p])
    g = torch.tensor(GRADS[0])
    p.grad = g.clone()
    opt.step()
    assert torch.equal(p.grad, g)


def _mars_reference(steps, lr, b1, b2, gamma, eps, wd, x0=X0, grads=GRADS, use_mars=True):
    x, m, v, expected, g_prev = x0.copy(), np.zeros_like(x0), np.zeros_like(x0), [], None
    clipped = []
    for t, g in enumerate(grads[:steps], start=1):
        if use_mars:
            c = g if g_prev is None else g + gamma * b1 / (1 - b1) * (g - g_prev)
            norm = np.linalg.norm(c)
            clipped.append(norm > 1)
            c = c / norm if norm > 1 else c
        else:
            c = g
        m = b1 * m + (1 - b1) * c
        v = b2 * v + (1 - b2) * c * c
        x = x - lr * ((m / (1 - b1**t)) / (np.sqrt(v / (1 - b2**t)) + eps) + wd * x)
        g_prev = g
        expected.append(x.copy())
    return expected, clipped


def test_mars_adamw_algorithm():
    hp = dict(lr=0.01, b1=0.9, b2=0.95, gamma=0.5, eps=1e-3, wd=0.1)
    expected, clipped = _mars_reference(4, **hp)
    assert any(clipped) and not all(clipped)  # both branches of the clip are exercised
    got = _run("mars", 4, lr=hp["lr"], momentum=hp["b1"], betas=(0.0, hp["b2"]),
               gamma=hp["gamma"], eps=hp["eps"], weight_decay=hp["wd"])
    _close(got, expected)


def test_mars_1d_parameters_get_adamw():
    x0, grads = X0[:, 0].copy(), [g[:, 0] for g in GRADS]
    hp = dict(lr=0.01, b1=0.9, b2=0.95, gamma=0.5, eps=1e-3, wd=0.1)
    expected, _ = _mars_reference(3, x0=x0, grads=grads, use_mars=False, **hp)
    kw = dict(lr=hp["lr"], betas=(hp["b1"], hp["b2"]), gamma=hp["gamma"], eps=hp["eps"],
              weight_decay=hp["wd"])
    _close(_run("mars", 3, x0=x0, grads=grads, **kw), expected)
    expected_1d, _ = _mars_reference(3, x0=x0, grads=grads, use_mars=True, **hp)
    _close(_run("mars", 3, x0=x0, grads=grads, optimize_1d=True, **kw), expected_1d)


def _eigvecs_desc(P):
    _, Q = np.linalg.eigh(P)
    return Q[:, ::-1]


def _soap_reference(steps, lr, b1, b2, eps, wd, freq):
    """Vyas et al. 2024, Alg. 3: Adam in the eigenbasis of Shampoo's factors L, R (β_s = β2)."""
    x = X0.copy()
    L, R = np.zeros((3, 3)), np.zeros((2, 2))
    M, V, QL, QR, expected = np.zeros_like(X0), np.zeros_like(X0), None, None, []
    for k, G in enumerate(GRADS[:steps]):
        if k == 0:  # first call: statistics and eigenbases only, no update
            L, R = (1 - b2) * G @ G.T, (1 - b2) * G.T @ G
            QL, QR = _eigvecs_desc(L), _eigvecs_desc(R)
            expected.append(x.copy())
            continue
        Gp = QL.T @ G @ QR
        M = b1 * M + (1 - b1) * G
        V = b2 * V + (1 - b2) * Gp * Gp
        N = QL @ ((QL.T @ M @ QR) / (np.sqrt(V) + eps)) @ QR.T
        x = x - lr * np.sqrt(1 - b2**k) / (1 - b1**k) * N
        x = (1 - lr * wd) * x
        L, R = b2 * L + (1 - b2) * G @ G.T, b2 * R + (1 - b2) * G.T @ G
        if k % freq == 0:  # one power step + QR, columns sorted by estimated eigenvalue
            for axis, (P, Q) in enumerate([(L, QL), (R, QR)]):
                order = np.argsort(-np.diag(Q.T @ P @ Q), kind="stable")
                V = np.take(V, order, axis=axis)
                Qn, _ = np.linalg.qr(P @ Q[:, order])
                if axis == 0:
                    QL = Qn
                else:
                    QR = Qn
        expected.append(x.copy())
    return expected


@pytest.mark.parametrize("freq,steps,rtol", [(100, 3, 1e-12), (2, 4, 1e-6)])
def test_soap_algorithm_3(freq, steps, rtol):
    """freq=2 exercises the QR refresh; the package computes that QR in float32 (documented
    deviation), hence the looser tolerance there."""
    hp = dict(lr=0.01, b1=0.8, b2=0.9, eps=1e-8, wd=0.1)
    expected = _soap_reference(steps, freq=freq, **hp)
    got = _run("soap", steps, lr=hp["lr"], momentum=hp["b1"], betas=(0.0, hp["b2"]),
               eps=hp["eps"], weight_decay=hp["wd"], precondition_frequency=freq)
    _close(got, expected, rtol=rtol, atol=rtol * 1e-2)


def test_build_rejects_bad_input():
    p = [torch.nn.Parameter(torch.zeros(2, 2))]
    with pytest.raises(ValueError, match="'sgd'.*allowed: soap, adan, lion, mars"):
        build("sgd", p)
    with pytest.raises(ValueError, match=r"\['gama'\].*gamma"):
        build("mars", p, gama=0.1)
    with pytest.raises(ValueError, match="maximize"):
        build("lion", p, maximize=True)
    with pytest.raises(ValueError, match="3 betas"):
        build("adan", p, betas=(0.9, 0.9))
    with pytest.raises(ValueError, match=r"betas must lie in \[0, 1\)"):
        build("lion", p, betas=(0.9, 1.0))


def test_soap_max_precondition_dim_reaches_soap_from_the_config():
    """``optimizer.soap_max_precondition_dim`` is SOAP's own limit: a side longer than it keeps
    the identity basis (no eigenbasis is kept for it), a shorter side gets one; the default is
    SOAP's 10,000, so configurations written before the key train as they did."""
    from asyncpp.train.components import optimizer_hparams
    from asyncpp.train.config import load_config

    assert load_config(None, [("optimizer.name", "soap")]).optimizer \
        .soap_max_precondition_dim == 10000
    cfg = load_config(None, [("optimizer.name", "soap"),
                             ("optimizer.soap_max_precondition_dim", "16")])
    hp = optimizer_hparams(cfg, torch.device("cpu"))
    assert hp["max_precondition_dim"] == 16
    p = torch.nn.Parameter(torch.randn(64, 8, dtype=torch.float64))
    opt = build_optimizer("soap", [("w", p)], **hp)
    for _ in range(2):
        p.grad = torch.randn_like(p)
        opt.step()
    basis = opt.state[p]["Q"]
    assert len(basis[0]) == 0 and basis[1].shape == (8, 8)
    with pytest.raises(Exception, match="soap_max_precondition_dim"):
        load_config(None, [("optimizer.soap_max_precondition_dim", "0")])
