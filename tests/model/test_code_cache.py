"""model.code_cache: the code cache's distribution against a plain loop (float64), its mixture with the
model's softmax, equal rows sharing mass, special tokens and predicted positions left out; HRRBert carries the
cache through save and load, refuses a bad one, and scores masked codes with it."""

from __future__ import annotations

import json
import math

import pytest
import torch

from model import HRRBert, PretrainedFileError, preset
from model.code_cache import CodeCache, cache_distribution, mix_log_probs, visible_codes


def loop_cache(e, ids, visible, special, sharpness):
    """The cache by its definition, one visible code at a time (float64)."""
    e = torch.nn.functional.normalize(e.double(), dim=1)
    out = torch.zeros(ids.shape[0], e.shape[0], dtype=torch.float64)
    for b in range(ids.shape[0]):
        js = [int(ids[b, t]) for t in range(ids.shape[1]) if visible[b, t]]
        for j in js:
            k = torch.tensor(
                [
                    0.0 if special[c] else math.exp(sharpness * (float(e[c] @ e[j]) - 1))
                    for c in range(e.shape[0])
                ],
                dtype=torch.float64,
            )
            out[b] += k / k.sum() / len(js)
    return out


def test_distribution_matches_the_definition():
    torch.manual_seed(0)
    e = torch.randn(12, 6, dtype=torch.float64)
    special = torch.zeros(12, dtype=torch.bool)
    special[:2] = True
    ids = torch.tensor([[0, 3, 5, 3, 7], [1, 4, 4, 0, 0], [0, 1, 0, 0, 0]])
    att = torch.tensor([[1, 1, 1, 1, 1], [1, 1, 1, 0, 0], [1, 1, 0, 0, 0]])
    predicted = torch.zeros_like(att, dtype=torch.bool)
    predicted[0, 2] = True  # code 5 is being predicted: not read
    vis = visible_codes(ids, att, predicted, special)
    assert vis.tolist() == [
        [False, True, False, True, True],
        [False, True, True, False, False],
        [False, False, False, False, False],
    ]
    got, has = cache_distribution(e, ids, vis, special, 7.0)
    want = loop_cache(e, ids, vis, special, 7.0)
    assert has.tolist() == [True, True, False]
    assert torch.allclose(got.double(), want, atol=1e-6)
    assert torch.allclose(got[:2].sum(1), torch.ones(2), atol=1e-5) and float(got[2].abs().sum()) == 0
    assert float(got[:, :2].abs().sum()) == 0  # special tokens get no mass
    assert int(got[1].argmax()) == 4  # a visible code is its own nearest code


def test_equal_rows_share_the_mass():
    """Rows that are alike (a table's untrained rows) split what a visible one of them brings."""
    e = torch.eye(6, dtype=torch.float64)
    e[3:] = e[3]  # rows 3, 4, 5 equal
    special = torch.zeros(6, dtype=torch.bool)
    ids = torch.tensor([[4, 1]])
    vis = torch.ones_like(ids, dtype=torch.bool)
    got, _ = cache_distribution(e, ids, vis, special, 50.0)
    assert torch.allclose(got[0, 3:], torch.full((3,), got[0, 4].item()))
    assert got[0, 1] > 2.9 * got[0, 4]  # the distinct visible code keeps its half nearly whole


def test_mixture():
    torch.manual_seed(1)
    logits = torch.randn(3, 5)
    cache = torch.softmax(torch.randn(3, 5), 1)
    has = torch.tensor([True, False, True])
    got = mix_log_probs(logits, cache, has, 0.25)
    p = torch.softmax(logits.double(), 1)
    want = torch.where(has[:, None], 0.75 * p + 0.25 * cache.double(), p).log()
    assert torch.allclose(got.double(), want, atol=1e-5)
    assert torch.allclose(got.exp().sum(1), torch.ones(3), atol=1e-5)
    assert torch.equal(mix_log_probs(logits, cache, has, 0.0), torch.log_softmax(logits, 1))


@pytest.mark.parametrize(
    "bad",
    [
        {"weight": 1.0, "sharpness": 5},
        {"weight": -0.1, "sharpness": 5},
        {"weight": 0.1, "sharpness": 0},
        {"weight": 0.1},
        [0.1, 5],
        {"weight": 0.1, "sharpness": float("nan")},
    ],
)
def test_bad_cache_refused(bad):
    with pytest.raises(ValueError):
        CodeCache.from_dict(bad)


def test_model_scores_with_its_cache_and_keeps_it(program, tmp_path):
    torch.manual_seed(0)
    m = HRRBert(preset("tiny", mode="base"), program).eval()
    special = m.special_tokens()
    codes = torch.nonzero(~special).flatten()[:6]
    ids = codes.repeat(2, 1)  # (2, 6)
    seg = torch.zeros_like(ids)
    att = torch.ones_like(ids)
    chosen = torch.zeros_like(ids, dtype=torch.bool)
    chosen[0, 2] = chosen[1, 4] = True
    ids_in = ids.clone()
    ids_in[chosen] = program.special_id("[MASK]")
    with torch.no_grad():
        alone = m.masked_log_probs(ids_in, seg, att, chosen)
        assert torch.allclose(alone, torch.log_softmax(m(ids_in, seg, att, mlm_mask=chosen), 1), atol=1e-5)
        m.mlm_cache = CodeCache(0.5, 40.0)
        cached = m.masked_log_probs(ids_in, seg, att, chosen)
    assert torch.allclose(cached.exp().sum(1), torch.ones(2), atol=1e-4)
    visible = codes[[0, 1, 3, 4, 5]]  # row 0 reads all but the predicted position
    gain = (cached - alone)[0]
    assert float(gain[visible].min()) > 0 and float(gain[codes[2]]) < float(gain[visible].min())
    m.save_pretrained(tmp_path / "m", card=False)
    assert json.loads((tmp_path / "m" / "config.json").read_text())["mlm_cache"] == {
        "weight": 0.5,
        "sharpness": 40.0,
    }
    back = HRRBert.from_pretrained(tmp_path / "m", program)
    assert back.mlm_cache == CodeCache(0.5, 40.0)
    meta = json.loads((tmp_path / "m" / "config.json").read_text())
    meta["mlm_cache"] = {"weight": 2, "sharpness": 40}
    (tmp_path / "m" / "config.json").write_text(json.dumps(meta))
    with pytest.raises(PretrainedFileError, match="mlm_cache"):
        HRRBert.from_pretrained(tmp_path / "m", program)
