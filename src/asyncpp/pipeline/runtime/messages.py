r"""What passes between two stages: one tensor, a tuple of tensors (hidden states with
position ids, an attention mask, …) or a dict of them (keyword arguments of the next stage's
first layer), and the gradient that comes back.

A stage's output :math:`y = (y_1, \dots, y_k)` is sent as one message. Its gradient message
holds :math:`\bar y_i = \partial \ell / \partial y_i` for the *differentiable* parts only —
the floating-point tensors; integer and boolean parts (position ids, masks) carry no
gradient — in the same order. A single tensor is its own message, unchanged (the common case
pays nothing). A tuple travels as one flat byte buffer,

.. math::
    \mathrm{wire}(y) = \mathrm{bytes}(y_1) \,\|\, \mathrm{pad} \,\|\, \mathrm{bytes}(y_2)
    \,\|\, \dots,

each part padded to :data:`ALIGN` bytes so that the receiver reads every part back as a view
of the buffer (no copy), with the part's dtype and shape from the stream's header
(:class:`Layout`). A dict travels as the tuple of its values in its own key order, the keys in
the header; its gradient is the tuple of its floating values' gradients, in that order.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

ALIGN = 16
"""Bytes each part of a packed message starts on (every dtype's element size divides it)."""


@dataclass(frozen=True)
class Layout:
    """The parts of a message: one ``(dtype, shape)`` each; ``packed`` when it is a tuple."""

    parts: tuple[tuple[torch.dtype, tuple[int, ...]], ...]
    packed: bool
    keys: tuple[str, ...] | None = None
    """The keys of a dict message, in order; None for a tensor or a tuple."""

    @staticmethod
    def of(msg) -> Layout:
        if isinstance(msg, Tensor):
            return Layout(((msg.dtype, tuple(msg.shape)),), False)
        if isinstance(msg, dict):
            return Layout(tuple((t.dtype, tuple(t.shape)) for t in msg.values()), True,
                          tuple(msg))
        return Layout(tuple((t.dtype, tuple(t.shape)) for t in msg), True)

    def nbytes(self) -> int:
        return sum(_padded(_size(d, s)) for d, s in self.parts)

    def wire(self) -> tuple[torch.dtype, tuple[int, ...]]:
        """The dtype and shape of the buffer that carries the message."""
        return self.parts[0] if not self.packed else (torch.uint8, (self.nbytes(),))

    def differentiable(self) -> Layout:
        """The layout of this message's gradient: its floating-point parts."""
        if not self.packed:
            return self
        return Layout(tuple(p for p in self.parts if p[0].is_floating_point), True)  # a tuple


def _size(dtype: torch.dtype, shape) -> int:
    n = 1
    for s in shape:
        n *= s
    return n * torch.empty((), dtype=dtype).element_size()


def _padded(n: int) -> int:
    return -(-n // ALIGN) * ALIGN


def check(msg, who: str) -> None:
    """A stage output must be a tensor, or a non-empty tuple or str-keyed dict of tensors."""
    if isinstance(msg, Tensor):
        return
    if isinstance(msg, tuple) and msg and all(isinstance(t, Tensor) for t in msg):
        return
    if isinstance(msg, dict) and msg and all(isinstance(k, str) and isinstance(t, Tensor)
                                             for k, t in msg.items()):
        return
    values = msg.values() if isinstance(msg, dict) else msg
    got = type(msg).__name__ if not isinstance(msg, (tuple, list, dict)) else \
        f"{type(msg).__name__} of " + ", ".join(type(t).__name__ for t in values)
    raise ValueError(f"{who} must return a tensor, or a tuple or dict of tensors, got {got}")


def pack(msg) -> Tensor:
    """The buffer that carries ``msg`` (the tensor itself when it is one, contiguous)."""
    if isinstance(msg, Tensor):
        return msg.contiguous()
    if isinstance(msg, dict):
        msg = tuple(msg.values())
    layout = Layout.of(msg)
    buf = torch.zeros(layout.nbytes(), dtype=torch.uint8, device=msg[0].device)
    off = 0
    for t in msg:
        n = t.numel() * t.element_size()
        buf[off:off + n] = t.detach().contiguous().reshape(-1).view(torch.uint8)
        off += _padded(n)
    return buf


def unpack(buf: Tensor, layout: Layout):
    """``msg`` back from its buffer: views of ``buf``, one per part."""
    if not layout.packed:
        return buf
    out, off = [], 0
    for dtype, shape in layout.parts:
        n = _size(dtype, shape)
        out.append(buf[off:off + n].view(dtype).reshape(shape))
        off += _padded(n)
    return dict(zip(layout.keys, out)) if layout.keys is not None else tuple(out)


def differentiable(msg) -> list[Tensor]:
    """The parts of ``msg`` that carry a gradient (floating point), in order."""
    if isinstance(msg, Tensor):
        return [msg] if msg.is_floating_point() else []
    values = msg.values() if isinstance(msg, dict) else msg
    return [t for t in values if t.is_floating_point()]


def gradient(grads: list[Tensor]):
    """The gradient message of an output whose differentiable parts have ``grads``."""
    return tuple(grads)
