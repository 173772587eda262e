"""VisitTransformer: visit grouping, pooling, masking, HRR embeddings, persistence, learning."""

from __future__ import annotations

import pytest
import torch

from hrr_kernel import HRREmbedding
from model import VisitTransformer, VisitTransformerConfig, group_visits

pytestmark = pytest.mark.usefixtures("one_thread")  # tests/conftest.py


N = 40


def flat():
    ids = torch.tensor([[1, 5, 6, 7, 8, 9, 0, 0], [1, 10, 11, 0, 0, 0, 0, 0]])
    seg = torch.tensor([[0, 0, 0, 1, 1, 2, 0, 0], [0, 0, 1, 0, 0, 0, 0, 0]])
    return ids, seg, ids != 0


def test_group_visits():
    ids, seg, mask = flat()
    codes, cmask = group_visits(ids, seg, mask)
    assert codes.shape == (2, 3, 3)
    assert codes[0].tolist() == [[1, 5, 6], [7, 8, 0], [9, 0, 0]]
    assert codes[1].tolist() == [[1, 10, 0], [11, 0, 0], [0, 0, 0]]
    assert cmask.sum().item() == int(mask.sum())


@pytest.mark.parametrize("pooling", ["sum", "attention"])
def test_shapes_and_masking(pooling):
    torch.manual_seed(0)
    model = VisitTransformer(VisitTransformerConfig(n_codes=N, dim=16, n_heads=2, pooling=pooling)).eval()
    ids, seg, mask = flat()
    for task, n in (("mortality", 1), ("chapters", 22)):
        assert model(ids, seg, mask, task=task).shape == (2, n)
    # appending padding codes and empty visits changes nothing
    ids2 = torch.cat([ids, torch.zeros(2, 4, dtype=torch.long)], 1)
    seg2 = torch.cat([seg, torch.full((2, 4), 7)], 1)
    a = model(ids, seg, mask, task="mortality")
    b = model(ids2, seg2, ids2 != 0, task="mortality")
    assert torch.allclose(a, b, atol=1e-5)
    # a patient's output does not depend on the other rows of the batch
    c = model(ids[1:, :3], seg[1:, :3], mask[1:, :3], task="mortality")
    assert torch.allclose(a[1:], c, atol=1e-5)


def test_hrr_embedding_and_persistence(program, tmp_path):
    def make(cfg):
        return HRREmbedding(program, cfg.dim, "base")

    cfg = VisitTransformerConfig(n_codes=program.n_concepts, dim=16, code_mode="base")
    model = VisitTransformer(cfg, make(cfg)).eval()
    ids = torch.randint(5, program.n_concepts, (3, 9))
    seg = torch.tensor([[0, 0, 1, 1, 1, 2, 2, 3, 3]] * 3)
    out = model(ids, seg, task="chapters")
    model.save_pretrained(tmp_path / "m")
    again = VisitTransformer.from_pretrained(tmp_path / "m", make).eval()
    assert torch.allclose(out, again(ids, seg, task="chapters"))


def test_bad_input():
    model = VisitTransformer(VisitTransformerConfig(n_codes=N, dim=16, max_visits=4))
    ids, seg, mask = flat()
    with pytest.raises(ValueError, match="no codes"):
        model(ids, seg, torch.zeros_like(mask), task="mortality")
    with pytest.raises(ValueError, match="max_visits"):
        model(ids, seg * 5, mask, task="mortality")
    with pytest.raises(ValueError, match="unknown task"):
        model(ids, seg, mask, task="los")
    with pytest.raises(ValueError, match="pooling"):
        VisitTransformerConfig(n_codes=N, pooling="max")
    with pytest.raises(ValueError, match="divisible"):
        VisitTransformerConfig(n_codes=N, dim=10, n_heads=3)


def last_visit_task(n: int, seed: int, v: int = 4, c: int = 3):
    """Flat inputs (the fine-tuning format) where every patient has code 7 in exactly one of ``v`` visits and
    the label is whether that visit is the last: only a model that groups the codes by segment and knows
    the visits' order can tell (AUROC 0.5 otherwise)."""
    g = torch.Generator().manual_seed(seed)
    codes = torch.randint(8, N, (n, v, c), generator=g)
    where = torch.randint(0, v, (n,), generator=g)
    codes[torch.arange(n), where, 0] = 7
    ids = codes.reshape(n, v * c)
    seg = torch.arange(v).repeat_interleave(c).expand(n, v * c).clone()
    return ids, seg, (where == v - 1).float()[:, None]


@pytest.mark.parametrize("pooling", ["sum", "attention"])
def test_learns_which_visit_is_last(pooling):
    from pipelines.train.metrics import auroc

    torch.manual_seed(0)
    ids, seg, y = last_visit_task(256, 0)
    model = VisitTransformer(VisitTransformerConfig(n_codes=N, dim=16, pooling=pooling, dropout=0.0))
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    for _ in range(120):
        loss = torch.nn.functional.binary_cross_entropy_with_logits(model(ids, seg, task="mortality"), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
    ids, seg, y = last_visit_task(256, 1)  # held out
    with torch.no_grad():
        score = model.eval()(ids, seg, task="mortality")[:, 0]
    assert auroc(y[:, 0].numpy(), score.numpy()) > 0.9  # chance: 0.5
