r"""Split a model given as an ordered list of layers into P contiguous pipeline stages.

The model is an ordered mapping ``name → module`` (an ``nn.ModuleDict``, a dict, or a list of
``(name, module)`` pairs; a plain sequence of modules is named "0", "1", …), whose composition
``x ↦ layer_{n-1}(… layer_0(x))`` is the model (a layer that returns a tuple — hidden states
with position ids, say — gives the next layer its positional arguments, a dict its keyword
arguments, across a stage boundary too): typically
``[embed_tokens, layers.0, …, layers.{L-1}, norm, lm_head]``. Stages are contiguous, so the
embedding lands on the first stage and norm + head on the last; the loss is given to the
executor (``loss_fn``).

Balancing: with costs :math:`c_j` (parameter counts by default), the boundaries minimise the
largest stage cost :math:`\max_s \sum_{j \in S_s} c_j` over contiguous splits (exact, by
dynamic programming), ties broken towards earlier boundaries.

Names are kept: layer ``"layers.3"`` of the model is ``"layers.3"`` in its stage, so a stage's
``state_dict`` keys are the full model's keys. A parameter shared by layers on different stages
(tied embedding and head) becomes one copy per stage; :attr:`StageModule.tied_parameters` maps
each local name to a key shared by the copies, for the executor's gradient all-reduce.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from torch import nn

BALANCE = ("parameters", "layers")


def _named_layers(layers) -> list[tuple[str, nn.Module]]:
    if isinstance(layers, (nn.ModuleDict, Mapping)):
        items = list(layers.items())
    elif isinstance(layers, nn.Sequential):
        items = list(layers.named_children())
    elif isinstance(layers, Sequence):
        items = [it if isinstance(it, tuple) else (str(j), it) for j, it in enumerate(layers)]
    else:
        raise ValueError(
            f"layers must be an ordered mapping name → module or a sequence of modules, got "
            f"{type(layers).__name__}"
        )
    for name, mod in items:
        if not isinstance(mod, nn.Module):
            raise ValueError(f"layer {name!r} is a {type(mod).__name__}, not an nn.Module")
    if not items:
        raise ValueError("cannot partition an empty list of layers")
    return items


def layer_costs(layers, balance="parameters") -> list[float]:
    """Cost of each layer: its parameter count (``"parameters"``), 1 (``"layers"``) or the
    given sequence."""
    items = _named_layers(layers)
    if isinstance(balance, str):
        if balance == "parameters":
            return [float(sum(p.numel() for p in mod.parameters())) for _, mod in items]
        if balance == "layers":
            return [1.0] * len(items)
        raise ValueError(f"unknown balance {balance!r}; allowed: {BALANCE} or a list of costs")
    costs = [float(c) for c in balance]
    if len(costs) != len(items) or any(not c >= 0 for c in costs):
        raise ValueError(
            f"balance must give one non-negative cost per layer ({len(items)}), got {balance!r}"
        )
    return costs


def balanced_boundaries(costs: Sequence[float], num_stages: int) -> list[int]:
    r"""Boundaries :math:`0 = b_0 < b_1 < … < b_P = n` minimising
    :math:`\max_s \sum_{b_s \le j < b_{s+1}} c_j` (every stage gets at least one layer)."""
    n = len(costs)
    if not isinstance(num_stages, int) or num_stages < 1:
        raise ValueError(f"num_stages must be a positive integer, got {num_stages!r}")
    if num_stages > n:
        raise ValueError(
            f"cannot split {n} layers into {num_stages} stages; use at most {n} stages"
        )
    prefix = [0.0]
    for c in costs:
        prefix.append(prefix[-1] + c)
    inf = float("inf")
    # best[k][j]: minimal max cost splitting the first j layers into k stages.
    best = [[inf] * (n + 1) for _ in range(num_stages + 1)]
    arg = [[0] * (n + 1) for _ in range(num_stages + 1)]
    best[0][0] = 0.0
    for k in range(1, num_stages + 1):
        for j in range(k, n - (num_stages - k) + 1):
            for i in range(k - 1, j):
                v = max(best[k - 1][i], prefix[j] - prefix[i])
                if v < best[k][j] - 1e-12:
                    best[k][j], arg[k][j] = v, i
    bounds = [n]
    for k in range(num_stages, 0, -1):
        bounds.append(arg[k][bounds[-1]])
    return bounds[::-1]


def partition(layers, num_stages: int, *, boundaries: Sequence[int] | None = None,
              balance="parameters") -> list[range]:
    """Layer index ranges of the P stages: explicit ``boundaries`` (P + 1 increasing indices
    from 0 to n, or the P − 1 inner ones), else balanced by ``balance``."""
    items = _named_layers(layers)
    n = len(items)
    if boundaries is None:
        b = balanced_boundaries(layer_costs(items, balance), num_stages)
    else:
        b = [int(x) for x in boundaries]
        if len(b) == num_stages - 1:
            b = [0, *b, n]
        if (len(b) != num_stages + 1 or b[0] != 0 or b[-1] != n
                or any(x >= y for x, y in zip(b, b[1:]))):
            raise ValueError(
                f"boundaries {list(boundaries)!r} do not split {n} layers into {num_stages} "
                f"non-empty stages; give {num_stages - 1} increasing inner indices in (0, {n})"
            )
    return [range(b[s], b[s + 1]) for s in range(num_stages)]


class StageModule(nn.Module):
    """The layers of one stage, applied in order: ``forward(x) = l_k(… l_j(x))``.

    Sub-modules keep their dotted names from the full model (``"layers.3"`` is reachable as
    ``stage.layers[3]``-style nested containers), so parameter names match the full model.
    """

    def __init__(self, named_layers: Sequence[tuple[str, nn.Module]], stage_index: int = 0,
                 num_stages: int = 1, tied_parameters: Mapping[str, str] | None = None) -> None:
        super().__init__()
        self.stage_index = stage_index
        self.num_stages = num_stages
        self.layer_names = [name for name, _ in named_layers]
        for name, mod in named_layers:
            parent = self
            parts = name.split(".")
            for part in parts[:-1]:
                if part not in parent._modules:
                    parent.add_module(part, nn.Module())
                parent = parent._modules[part]
            parent.add_module(parts[-1], mod)
        self.tied_parameters = dict(tied_parameters or {})

    def forward(self, *args):
        """Apply this stage's layers in order; a layer that returns a tuple gives the next
        layer (or the next stage) its positional arguments, a dict its keyword arguments."""
        x = args if len(args) > 1 else args[0]
        for name in self.layer_names:
            layer = self.get_submodule(name)
            x = layer(*x) if isinstance(x, tuple) else layer(**x) if isinstance(x, dict) \
                else layer(x)
        return x


def build_stages(layers, num_stages: int, *, boundaries: Sequence[int] | None = None,
                 balance="parameters", stages: Sequence[int] | None = None) -> list[StageModule]:
    """Stage modules of a partition (only those in ``stages``, default all). Parameters shared
    across stages are reported in each stage's ``tied_parameters`` (local name → the name of
    the first stage's copy); the caller's process owns one copy per stage it builds."""
    items = _named_layers(layers)
    ranges = partition(items, num_stages, boundaries=boundaries, balance=balance)
    owner: dict[int, list[tuple[int, str]]] = {}
    for s, rng in enumerate(ranges):
        seen = set()
        for j in rng:
            lname, mod = items[j]
            for pname, p in mod.named_parameters(remove_duplicate=False):
                if id(p) in seen:
                    continue
                seen.add(id(p))
                owner.setdefault(id(p), []).append((s, f"{lname}.{pname}"))
    wanted = range(num_stages) if stages is None else stages
    out = []
    for s in wanted:
        if not 0 <= s < num_stages:
            raise ValueError(f"stage index {s} out of range for {num_stages} stages")
        tied = {}
        for owners in owner.values():
            stage_set = {o[0] for o in owners}
            if len(stage_set) > 1 and s in stage_set:
                key = owners[0][1]
                for o in owners:
                    if o[0] == s:
                        tied[o[1]] = key
        out.append(StageModule([items[j] for j in ranges[s]], s, num_stages, tied))
    return out


def build_stage(layers, stage_index: int, num_stages: int, *,
                boundaries: Sequence[int] | None = None, balance="parameters") -> StageModule:
    """The module of stage ``stage_index`` of a partition (see :func:`build_stages`)."""
    return build_stages(layers, num_stages, boundaries=boundaries, balance=balance,
                        stages=[stage_index])[0]
