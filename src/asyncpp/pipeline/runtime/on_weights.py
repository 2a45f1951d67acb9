r"""A module run on given weights: :math:`y = f(x; w)` with :math:`w` a dict of tensors by
parameter name — what ``torch.func.functional_call(module, w, x)`` computes, with the
parameter slots found once instead of at every call.

``functional_call`` walks the module tree (``named_modules``, ``named_parameters``, tied-name
maps, ``get_submodule`` per name) twice per call, to swap the tensors in and back; a pipeline
stage calls it once per microbatch, so on small microbatches the walk is a visible share of
the step. :class:`OnWeights` resolves every slot — the ``_parameters`` dict of the owning
sub-module and the attribute name, tied names included — when it is built, and a call is one
dict store per slot in, the module's call, one per slot back. The same tensors reach the same
operations: the output and every gradient equal ``functional_call``'s bit for bit.
"""

from __future__ import annotations

from torch import Tensor, nn


class OnWeights:
    """``module`` called on weights ``w`` (every parameter by its ``named_parameters()`` name;
    a tied parameter's other names read the same tensor, as ``functional_call``'s
    ``tie_weights=True``). The module's parameters are restored when the call returns or
    raises. Its set of parameters must not change after this is built (a stage's is fixed)."""

    def __init__(self, module: nn.Module) -> None:
        first = {id(p): n for n, p in module.named_parameters()}
        self.module = module
        self.slots: list[tuple[dict, str, str]] = []
        """(owner's ``_parameters``, attribute, the name ``w`` gives it), one per name of
        every parameter, tied names included."""
        for name, p in module.named_parameters(remove_duplicate=False):
            owner, _, attr = name.rpartition(".")
            self.slots.append((module.get_submodule(owner)._parameters, attr, first[id(p)]))

    def __call__(self, weights: dict[str, Tensor], args: tuple, kwargs: dict | None = None):
        slots = self.slots
        saved = [params[attr] for params, attr, _ in slots]
        try:
            for params, attr, name in slots:
                params[attr] = weights[name]
            return self.module(*args, **(kwargs or {}))
        finally:
            for (params, attr, _), t in zip(slots, saved):
                params[attr] = t
