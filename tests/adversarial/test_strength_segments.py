"""Visit segments matter: the BERT adds its segment embedding (changing ``segment_ids`` changes ``encode``
and the embedding gets a gradient); the visit Transformer groups codes by ``segment_ids`` and orders the
visits (regrouping the same codes, or swapping two visits, changes its output)."""

from __future__ import annotations

import pytest
import torch

from model import HRRBert, VisitTransformer, VisitTransformerConfig, preset

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def program(tmp_path_factory):
    from train_fixtures import compile_fixture

    from hrr_kernel import load_program

    return load_program(compile_fixture(tmp_path_factory.mktemp("programs")))


def _batch(program):
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(5, program.n_concepts, (2, 9), generator=g)
    ids[:, 0] = 1  # [CLS]
    att = torch.ones(2, 9, dtype=torch.bool)
    seg = torch.tensor([[0, 0, 0, 1, 1, 1, 2, 2, 2]] * 2)
    return ids, seg, att


@pytest.mark.parametrize("mode", ["unstructured", "base"])
def test_bert_segments_change_encode(program, mode):
    torch.manual_seed(0)
    m = HRRBert(preset("tiny", mode=mode, dropout=0.0, attn_dropout=0.0), program).eval()
    ids, seg, att = _batch(program)
    other = seg.clone()
    other[:, 6:] = 1  # the last visit joins the second one: same codes, same positions
    with torch.no_grad():
        a, b = m.encode(ids, seg, att), m.encode(ids, other, att)
    assert not torch.allclose(a[:, 6:], b[:, 6:], atol=1e-4)  # the regrouped codes see another segment
    assert not torch.allclose(a[:, :6], b[:, :6], atol=1e-4)  # and, through attention, everything else
    m.train()
    m.encode(ids, seg, att).pow(2).sum().backward()
    grad = m.embeddings.segment.weight.grad
    assert (
        grad is not None and grad[:3].abs().sum() > 0 and grad[3:].abs().sum() == 0
    )  # only segments 0-2 used


def _vt(pooling="sum"):
    torch.manual_seed(0)
    return VisitTransformer(
        VisitTransformerConfig(n_codes=40, dim=16, n_heads=2, pooling=pooling, dropout=0.0)
    ).eval()


@pytest.mark.parametrize("pooling", ["sum", "attention"])
def test_visit_transformer_groups_by_segment(pooling):
    m = _vt(pooling)
    ids = torch.tensor([[5, 6, 7, 8]])
    att = torch.ones_like(ids, dtype=torch.bool)
    outs = [
        m(ids, torch.tensor([s]), att, task="chapters")
        for s in ([0, 0, 1, 1], [0, 1, 1, 1], [0, 0, 0, 0], [0, 1, 2, 3])
    ]
    for i in range(len(outs)):
        for j in range(i + 1, len(outs)):
            assert not torch.allclose(outs[i], outs[j], atol=1e-5), (i, j)


@pytest.mark.parametrize("pooling", ["sum", "attention"])
def test_visit_transformer_orders_the_visits(pooling):
    m = _vt(pooling)
    ids = torch.tensor([[5, 6, 7, 8, 9]])
    att = torch.ones_like(ids, dtype=torch.bool)
    a = m(ids, torch.tensor([[0, 0, 1, 2, 2]]), att, task="chapters")  # visits {5,6} {7} {8,9}
    b = m(ids, torch.tensor([[2, 2, 1, 0, 0]]), att, task="chapters")  # the same visits, reversed
    assert not torch.allclose(a, b, atol=1e-5)
