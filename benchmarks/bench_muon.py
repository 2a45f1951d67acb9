"""Benchmark 1 — Muon step: asyncpp.optim.Muon vs torch.optim.Muon on the SmolLM-135M matrices.

Both iterate Newton–Schulz in bf16 (torch.optim.Muon's fixed precision). Reports the ratio
torch_time / asyncpp_time (target ≥ 1.0), then fp32 vs bf16 Newton–Schulz time and the
orthogonality error ‖OᵀO − I‖_F/√n and singular-value band of each precision.
"""

from __future__ import annotations

import argparse

import torch
from bench_common import interleaved, print_table, save, summary

from asyncpp.optim import Muon, newton_schulz, singular_value_band


def smollm_135m_shapes(layers: int = 30, div: int = 1) -> list[tuple[int, int]]:
    """The 7 hidden matrices per layer of SmolLM-135M (hidden 576, 9 heads, 3 kv heads, 1536),
    every side divided by ``div`` (smoke tests only)."""
    h, kv, ff = 576 // div, 192 // div, 1536 // div
    per_layer = [(h, h), (kv, h), (kv, h), (h, h), (ff, h), (ff, h), (h, ff)]
    return per_layer * layers


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__)
    cuda = torch.cuda.is_available()
    ap.add_argument("--layers", type=int, default=30 if cuda else 1,
                    help="layers of SmolLM-135M (7 matrices each; 30 = all 210). The CPU "
                         "default is 1: bfloat16 matmuls are emulated on this CPU (no "
                         "AVX-512-BF16), so one torch.optim.Muon step over all 210 matrices "
                         "would take tens of minutes")
    ap.add_argument("--repeats", type=int, default=3 if cuda else 2)
    ap.add_argument("--warmup", type=int, default=1 if cuda else 0)
    ap.add_argument("--div", type=int, default=1, help="shrink every side (smoke tests)")
    ap.add_argument("--device", default="cuda" if cuda else "cpu")
    args = ap.parse_args(argv)
    dev = torch.device(args.device)
    sync = torch.cuda.synchronize if dev.type == "cuda" else None
    torch.manual_seed(0)
    shapes = smollm_135m_shapes(args.layers, args.div)
    ours = [torch.nn.Parameter(0.02 * torch.randn(s, device=dev)) for s in shapes]
    theirs = [torch.nn.Parameter(p.detach().clone()) for p in ours]
    fp32 = [torch.nn.Parameter(p.detach().clone()) for p in ours]
    for p, q, r in zip(ours, theirs, fp32):
        p.grad = torch.randn_like(p)
        q.grad = p.grad.clone()
        r.grad = p.grad.clone()
    opt_ours = Muon(ours, lr=1e-3, weight_decay=0.0, ns_dtype="bfloat16")
    opt_fp32 = Muon(fp32, lr=1e-3, weight_decay=0.0, ns_dtype="float32")
    opt_torch = torch.optim.Muon(theirs, lr=1e-3, weight_decay=0.0)
    times = interleaved({"torch.optim.Muon": opt_torch.step, "asyncpp Muon (bf16)": opt_ours.step,
                         "asyncpp Muon (fp32)": opt_fp32.step},
                        args.repeats, warmup=args.warmup, sync=sync)
    rows = [(k, summary(v)) for k, v in times.items()]
    print(f"{len(shapes)} matrices, device {dev}")
    print_table("Muon step", rows, baseline="torch.optim.Muon")
    step = dict(rows)
    ratio = step["torch.optim.Muon"]["median"] / step["asyncpp Muon (bf16)"]["median"]
    ratio32 = step["torch.optim.Muon"]["median"] / step["asyncpp Muon (fp32)"]["median"]
    print(f"\nspeed ratio torch/asyncpp at the same precision (bf16) = {ratio:.3f} "
          f"(target >= 1.0)")
    print(f"speed ratio torch (bf16) / asyncpp (fp32, ns_dtype='auto' on CPU) = {ratio32:.3f}")

    # Newton–Schulz precision: the gradients stacked by shape, as Muon does.
    grads = [p.grad for p in ours]
    by_shape: dict[tuple, list] = {}
    for g in grads:
        by_shape.setdefault(tuple(g.shape), []).append(g)
    stacks = [torch.stack(v) for v in by_shape.values()]
    outputs: dict = {}

    def run(dtype):
        def f():
            outputs[dtype] = [newton_schulz(s, dtype=dtype) for s in stacks]
        return f

    ns_times = interleaved({"NS bf16": run(torch.bfloat16), "NS fp32": run(torch.float32)},
                           args.repeats, warmup=args.warmup, sync=sync)
    ns_rows = [(k, summary(v)) for k, v in ns_times.items()]
    print_table("Newton–Schulz over all matrices", ns_rows, baseline="NS fp32")
    quality = {}
    for name, dtype in (("bf16", torch.bfloat16), ("fp32", torch.float32)):
        errs, lo, hi = [], 1e9, 0.0
        for O in outputs[dtype]:
            O = O.double()
            wide = O if O.shape[-2] <= O.shape[-1] else O.mT
            eye = torch.eye(wide.shape[-2], dtype=torch.float64, device=O.device)
            err = torch.linalg.matrix_norm(wide @ wide.mT - eye) / wide.shape[-2] ** 0.5
            errs.append(float(err.max()))
            a, b = singular_value_band(O)
            lo, hi = min(lo, a), max(hi, b)
        quality[name] = {"orth_err_rms": max(errs), "sv_min": lo, "sv_max": hi}
        print(f"{name}: max ‖OOᵀ−I‖_F/√n = {max(errs):.3f}, "
              f"singular values in [{lo:.3f}, {hi:.3f}]")
    result = {
        "benchmark": "muon_step",
        "matrices": len(shapes),
        "device": str(dev),
        "step": step,
        "ratio_torch_over_asyncpp": ratio,
        "ratio_torch_bf16_over_asyncpp_fp32": ratio32,
        "newton_schulz": dict(ns_rows),
        "quality": quality,
    }
    print("wrote", save(f"muon_step_{dev.type}", result))
    return result


if __name__ == "__main__":
    main()
