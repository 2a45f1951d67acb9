"""Shared pytest fixtures of ``tests/``."""

from __future__ import annotations

import pytest
import torch


@pytest.fixture
def one_thread():
    """Run a test single-threaded: small-tensor tests are faster without intra-op threads,
    and several test processes share few cores (use via ``pytest.mark.usefixtures``)."""
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)
