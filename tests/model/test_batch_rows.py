"""Batch-row builds: a training step of a task head (BERT fine-tuning, MemN2N, the visit Transformer,
Doctor2Vec) composes only the HRR rows its batch uses, never the full matrix; evaluation builds the full
matrix once and reuses it while the parameters do not change."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from hrr_kernel import HRREmbedding, load_program
from model import HRRBert, MemN2N, MemN2NConfig, VisitTransformer, VisitTransformerConfig, preset
from model.doctor2vec import Doctor2Vec, Doctor2VecConfig
from tests.helpers.synthetic_program import random_edges, write_program

pytestmark = pytest.mark.usefixtures("one_thread")  # tests/conftest.py

N = 400  # concepts: a batch below uses far fewer than half of them


@pytest.fixture(scope="module")
def program(tmp_path_factory):
    root = tmp_path_factory.mktemp("rows") / "p"
    edges = random_edges(np.random.default_rng(2), N, 50, 4, 1200)
    return load_program(write_program(root, n_concepts=N, n_atoms=50, n_relations=4, edges=edges))


@pytest.fixture
def plans(program, monkeypatch):
    """The row sets the composer is asked for (None: the full matrix)."""
    asked: list[list[int] | None] = []
    real = program.plan_for

    def spy(rows=None):
        asked.append(None if rows is None else sorted(set(rows.tolist())))
        return real(rows)

    monkeypatch.setattr(program, "plan_for", spy)
    return asked


def ids_of(*shape, seed=0, low=5, high=60):
    return torch.randint(low, high, shape, generator=torch.Generator().manual_seed(seed))


def test_bert_finetuning_step_composes_the_batch_rows_and_evaluation_caches(program, plans):
    torch.manual_seed(0)
    model = HRRBert(preset("tiny", mode="add"), program).train()
    ids = ids_of(4, 12)
    ids[:, 0] = 1
    seg = torch.zeros_like(ids)
    model(ids, seg, task="chapters").sum().backward()
    assert plans == [sorted(set(ids.flatten().tolist()))]
    assert model.embeddings.token.table.grad is not None and model.embeddings.token.atoms.grad is not None
    plans.clear()
    model.eval()
    with torch.no_grad():
        first = model(ids, seg, task="chapters")
        again = model(ids_of(4, 12, seed=1), seg, task="chapters")
    assert plans == [None] and first.shape == again.shape  # one full build, then the cache
    with torch.no_grad():
        model.embeddings.token.atoms.add_(0.01)  # a parameter changed: built again
        model(ids, seg, task="chapters")
    assert plans == [None, None]


def test_memory_network_visit_transformer_and_doctor2vec_steps_compose_batch_rows(program, plans):
    torch.manual_seed(0)
    w = 10
    c = MemN2NConfig(n_words=w, n_codes=N, n_answers=3, dim=16, hops=2, max_memories=8)
    mem = MemN2N(c, lambda: HRREmbedding(program, 16, "base")).train()
    facts = ids_of(2, 5, 3, low=w + 5, high=w + 60)
    logits, _ = mem(facts, torch.randint(1, w, (2, 3)))
    logits.sum().backward()
    assert plans and all(p is not None and len(p) <= 55 for p in plans)
    plans.clear()

    cfg = VisitTransformerConfig(n_codes=N, dim=16, code_mode="base")
    vt = VisitTransformer(cfg, HRREmbedding(program, 16, "base")).train()
    ids = ids_of(3, 9)
    vt(ids, torch.tensor([[0, 0, 1, 1, 1, 2, 2, 3, 3]] * 3), task="chapters").sum().backward()
    assert len(plans) == 1 and set(plans[0]) == set(ids.flatten().tolist()) | {0}  # 0: visit padding
    plans.clear()

    emb = HRREmbedding(program, 16, "base")
    d2v = Doctor2Vec(Doctor2VecConfig(N, 12, dim=16, code_mode="base"), emb).train()
    g = torch.Generator().manual_seed(0)
    batch = {
        "patient_codes": ids_of(6, 5),
        "patient_segments": torch.tensor([[0, 0, 1, 0, 0]]).expand(6, 5).clone(),
        "patient_age": torch.tensor([30.0, 45, 50, 70, 20, 55]),
        "patient_sex": torch.tensor([1, 2, 0, 1, 2, 1]),
        "memory": torch.tensor([[0, 1, -1], [2, 3, 4], [5, -1, -1]]),
        "conditions": torch.randint(5, 60, (3, 2), generator=g),
        "excluded": torch.zeros(3, 1, dtype=torch.long),
        "age_band": torch.tensor([[18.0, 65.0]]).expand(3, 2).clone(),
        "sex": torch.zeros(3, dtype=torch.long),
        "category": torch.ones(3, dtype=torch.long),
        "text": torch.randint(2, 12, (3, 4), generator=g),
        "label": torch.tensor([1, 0, 1]),
    }
    loss, _ = d2v.loss(batch)
    loss.backward()
    assert plans and None not in plans
    assert emb.atoms.grad is not None
