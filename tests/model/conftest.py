"""Fixtures: the compiled fixture program (with its special tokens) and a second, different program."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from hrr_kernel import load_program
from tests.helpers.synthetic_program import random_edges, write_program

FIXTURE_RELEASE = Path(__file__).resolve().parents[1] / "data" / "snomed_mini_20220531"


@pytest.fixture(scope="session")
def program(tmp_path_factory):
    from ontology_compiler import compile_ontology

    path = compile_ontology(FIXTURE_RELEASE, out=tmp_path_factory.mktemp("programs")).path
    return load_program(path)


@pytest.fixture(scope="session")
def other_program(tmp_path_factory, program):
    n = program.n_concepts
    root = tmp_path_factory.mktemp("other") / "p"
    write_program(
        root,
        n_concepts=n,
        n_atoms=9,
        n_relations=3,
        edges=random_edges(np.random.default_rng(1), n, 9, 3, 60),
    )
    return load_program(root)
