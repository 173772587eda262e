"""MLM masking follows ``prob`` at every rate (not only the default 0.15), and ``mask_prob`` of the run's
config reaches the training step and the validation (the logged masked counts scale with it)."""

from __future__ import annotations

import json

import pytest
import torch
from train_fixtures import dataset_dir, program_dir  # noqa: F401

from pipelines.train.mlm import mask_tokens
from pipelines.train.pretrain import pretrain

SPECIAL = torch.tensor([0, 1, 2, 3, 4])


def masked_share(prob: float, seed: int = 0) -> tuple[float, torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(5, 1000, (400, 128), generator=g)
    ids[:, 0] = 1
    ids[:, 100:] = 0
    att = ids != 0
    out, chosen, targets = mask_tokens(
        ids, att, mask_id=3, special=SPECIAL, candidates=torch.arange(5, 1000), prob=prob, generator=g
    )
    maskable = att & ~torch.isin(ids, SPECIAL)
    assert not (chosen & ~maskable).any() and torch.equal(targets, ids[chosen])
    return float(chosen.sum() / maskable.sum()), chosen, maskable


@pytest.mark.parametrize("prob", [0.05, 0.3, 0.5, 0.9])
def test_the_chosen_share_is_prob(prob):
    share, _, _ = masked_share(prob)
    assert abs(share - prob) < 0.01, (share, prob)


def test_prob_zero_and_one():
    assert masked_share(0.0)[0] == 0.0
    _, chosen, maskable = masked_share(1.0)
    assert torch.equal(chosen, maskable)  # every real, non-special code


def _masked_counts(run_dir):
    recs = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return sum(r["masked"] for r in recs if "masked" in r), sum(
        r["val_masked"] for r in recs if "val_masked" in r
    )


def test_mask_prob_reaches_training_and_validation(tmp_path, dataset_dir, program_dir):  # noqa: F811
    kw = dict(
        model="tiny", batch_size=16, log_every=1, val_every=2, device="cpu", progress=False, max_steps=4
    )
    counts = {}
    for p in (0.1, 0.5):
        r = pretrain(dataset_dir, program_dir, out=tmp_path, run_id=f"p{p}", mask_prob=p, **kw)
        counts[p] = _masked_counts(r.run_dir)
    (train_lo, val_lo), (train_hi, val_hi) = counts[0.1], counts[0.5]
    assert train_lo > 0 and val_lo > 0
    # 5 times the share: several times the masked codes (the same batches; with the same generators the
    # codes chosen at 0.1 are a subset of those at 0.5); a step that ignores mask_prob gives a ratio of 1
    assert train_hi > 2.5 * train_lo and val_hi > 2.5 * val_lo, counts
