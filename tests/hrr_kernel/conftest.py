"""Fixtures: tiny format-1 programs written to tmp_path."""

from __future__ import annotations

import numpy as np
import pytest

from tests.helpers.synthetic_program import random_edges, write_program


@pytest.fixture
def make_program(tmp_path):
    """Factory: write a format-1 program and return its folder.

    ``make_program(n_concepts, n_atoms, n_relations, edges=None, n_edges=..., seed=...)``; random edges when
    ``edges`` is None.
    """
    counter = iter(range(10_000))

    def _make(n_concepts=7, n_atoms=5, n_relations=3, edges=None, n_edges=20, seed=0, name=None):
        if edges is None:
            edges = random_edges(np.random.default_rng(seed), n_concepts, n_atoms, n_relations, n_edges)
        root = tmp_path / (name or f"program{next(counter)}")
        write_program(root, n_concepts=n_concepts, n_atoms=n_atoms, n_relations=n_relations, edges=edges)
        return root

    return _make
