r"""Layer → stage partition, and splitting a model into a pipeline stage (module-dict surgery).

Balanced split of L layers over P stages: stage s holds

.. math::
    n_s = \lfloor L/P \rfloor + [\,s < L \bmod P\,]

consecutive layers (the extra ones go to the *first* stages, since the last stage also carries
the output head and the loss). Stage 0 also holds the embedding, stage P−1 the final norm and
the head. With tied embeddings the shared matrix lives on both the first and the last stage;
in one process it is a single parameter, assigned to stage 0 for optimizer/delay purposes.

This is the partition the single-process simulation uses; the multi-process executor
(``asyncpp.pipeline``) must use the same function so the two runs agree.
"""

from __future__ import annotations

from torch import nn

from .llama import Transformer


def partition_layers(n_layers: int, n_stages: int) -> list[range]:
    """Consecutive layer indices of each stage (see the module docstring for the sizes)."""
    if not (isinstance(n_stages, int) and n_stages >= 1):
        raise ValueError(f"pipeline.stages must be a positive integer, got {n_stages!r}")
    if n_stages > n_layers:
        raise ValueError(
            f"pipeline.stages={n_stages} exceeds model.n_layers={n_layers}: every stage needs at "
            f"least one layer; use at most {n_layers} stages or a deeper model"
        )
    base, extra = divmod(n_layers, n_stages)
    out, start = [], 0
    for s in range(n_stages):
        n = base + (1 if s < extra else 0)
        out.append(range(start, start + n))
        start += n
    return out


def pipeline_boundaries(n_layers: int, n_stages: int) -> list[int]:
    """The same partition as boundaries over ``Transformer.pipeline_layers()`` =
    ``[tok_embeddings, layers.0 … layers.{L-1}, norm, output]`` (L + 3 entries): P + 1
    increasing indices from 0 to L + 3, for ``asyncpp.pipeline.stages.build_stage``."""
    ranges = partition_layers(n_layers, n_stages)
    return [0] + [1 + r.start for r in ranges[1:]] + [n_layers + 3]


def stage_of_parameter(name: str, n_layers: int, n_stages: int) -> int:
    """Stage owning parameter ``name`` (``tok_embeddings.*`` → 0, ``layers.i.*`` → stage of i,
    ``norm.*`` / ``output.*`` → P−1)."""
    if name.startswith("tok_embeddings."):
        return 0
    if name.startswith("layers."):
        i = int(name.split(".")[1])
        for s, r in enumerate(partition_layers(n_layers, n_stages)):
            if i in r:
                return s
        raise ValueError(f"parameter {name!r} names layer {i}, beyond n_layers={n_layers}")
    if name.startswith(("norm.", "output.")):
        return n_stages - 1
    raise ValueError(f"cannot place parameter {name!r} on a pipeline stage")


def stage_named_parameters(model: Transformer,
                           n_stages: int) -> list[list[tuple[str, nn.Parameter]]]:
    """The model's ``(name, param)`` pairs grouped by stage; a tied matrix appears once
    (on stage 0)."""
    groups: list[list[tuple[str, nn.Parameter]]] = [[] for _ in range(n_stages)]
    L = model.config.n_layers
    for name, p in model.named_parameters():  # removes duplicates: the tied head stays on 0
        groups[stage_of_parameter(name, L, n_stages)].append((name, p))
    return groups


def split_stage(model: Transformer, stage: int, n_stages: int) -> Transformer:
    """Turn ``model`` (in place) into pipeline stage ``stage`` of ``n_stages`` and return it:
    drop the layers of other stages, the embedding unless first, norm and head unless last."""
    ranges = partition_layers(model.config.n_layers, n_stages)
    if not 0 <= stage < n_stages:
        raise ValueError(f"stage {stage} out of range for {n_stages} stages")
    keep = {str(i) for i in ranges[stage]}
    for key in list(model.layers.keys()):
        if key not in keep:
            del model.layers[key]
    if stage != 0:
        model.tok_embeddings = None
    if stage != n_stages - 1:
        model.norm = None
        model.output = None
    return model
