"""Fixtures every test folder may use."""

from __future__ import annotations

import pytest


@pytest.fixture
def one_thread():
    """Tiny tensors: one intra-op thread avoids oversubscription stalls on a shared CPU."""
    import torch

    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)
