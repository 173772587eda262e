"""Splits on synthetic arrays: pretraining validation drawn like training, sizes larger than the pool,
the ROOD hold-out reaching its ``rood_unseen`` target and never leaking into other splits."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.stats import chi2_contingency

from pipelines.data.splits import (
    FINETUNE_TRAIN,
    FINETUNE_VAL,
    N_SPECIAL,
    PRETRAIN_TRAIN,
    PRETRAIN_VAL,
    ROOD,
    TEST,
    SplitOptions,
    assign_splits,
    choose_rood,
    rood_masks,
    unseen_target,
)

DEMO_SIZES = {
    "finetune_train": 4000,
    "finetune_val": 600,
    "disease_train": 4000,
    "disease_val": 600,
    "test": 1000,
}


def visit_counts(n: int, seed: int) -> np.ndarray:
    """(P,) visits per patient, MIMIC-like: about half have one visit, a long tail of many."""
    return np.minimum(np.random.default_rng(seed).geometric(0.55, n), 100)


def cohort(n: int = 20_000, n_codes: int = 6000, seed: int = 0):
    """Distinct (patient, concept) pairs with Zipf-like code frequencies, concept ids after the specials.

    Returns pair_patient (U,), pair_concept (U,), n_visits (P,), n_concepts.
    """
    rng = np.random.default_rng(seed)
    k = 1 + rng.poisson(3, n)  # codes drawn per patient
    w = 1.0 / np.arange(1, n_codes + 1) ** 1.1
    pp = np.repeat(np.arange(n), k)
    pc = N_SPECIAL + rng.choice(n_codes, size=len(pp), p=w / w.sum())
    n_concepts = n_codes + N_SPECIAL
    pair = np.unique(pp * n_concepts + pc)
    return pair // n_concepts, (pair % n_concepts).astype(np.int32), visit_counts(n, seed + 1), n_concepts


@pytest.mark.parametrize("seed", range(5))
def test_pretrain_val_has_the_visit_counts_of_pretrain_train(seed):
    n = 20_000
    n_visits = visit_counts(n, 0)
    rood = np.zeros(n, bool)
    rood[np.random.default_rng(1).choice(n, 200, replace=False)] = True
    split, _, _ = assign_splits(n_visits, rood, None, SplitOptions(seed=seed, **DEMO_SIZES))
    train, val = n_visits[split == PRETRAIN_TRAIN], n_visits[split == PRETRAIN_VAL]
    assert len(val) == round(0.1 * (len(train) + len(val)))
    table = np.array([[np.sum(np.minimum(x, 6) == v) for v in range(1, 7)] for x in (train, val)])
    assert chi2_contingency(table).pvalue > 0.01, table
    assert abs(train.mean() - val.mean()) < 0.06
    # the fine-tuning sets took multi-visit patients, so pretraining has fewer of them than the cohort
    assert (val >= 2).mean() < (n_visits >= 2).mean()
    assert (val >= 2).mean() > 0.2


def test_sizes_larger_than_the_pool_take_what_there_is():
    n_visits = visit_counts(800, 3)
    eligible = int((n_visits >= 2).sum())
    split, disease, used = assign_splits(n_visits, np.zeros(800, bool), None, SplitOptions(**DEMO_SIZES))
    assert eligible < 1000
    assert used["test"] == int((split == TEST).sum()) == eligible  # every eligible patient, none left
    assert used["finetune_val"] == int((split == FINETUNE_VAL).sum()) == 0
    assert used["finetune_train"] == 0 and used["finetune_train_requested"] == 4000
    assert used["test_requested"] == 1000 and "disease_train_requested" in used
    assert (split >= 0).all() and (split == PRETRAIN_TRAIN).sum() > 0
    assert disease.sum() == used["test"]


def test_sizes_used_when_the_pool_runs_short_midway():
    n_visits = visit_counts(5000, 4)
    eligible = int((n_visits >= 2).sum())
    assert 1600 < eligible < 5600
    split, disease, used = assign_splits(n_visits, np.zeros(5000, bool), None, SplitOptions(**DEMO_SIZES))
    assert used["test"] == 1000 and used["finetune_val"] == 600 and "test_requested" not in used
    assert used["finetune_train"] == int((split == FINETUNE_TRAIN).sum()) == eligible - 1600
    assert used["disease_train"] == used["finetune_train"] and used["finetune_train_requested"] == 4000
    ft = np.isin(split, (FINETUNE_TRAIN, FINETUNE_VAL, TEST))
    assert (n_visits[ft] >= 2).all() and disease[ft].all() and not disease[~ft].any()


def check_hold_out(pp, pc, n, held, rood, unseen):
    """The held-out codes occur only in rood patients; rood/rood_unseen follow the rule."""
    assert held.dtype == np.int32 and len(np.unique(held)) == len(held)
    assert (held >= N_SPECIAL).all()
    hit = np.isin(pc, held)
    assert set(np.unique(pp[hit]).tolist()) == set(np.flatnonzero(rood).tolist())
    n_held = np.bincount(pp, weights=hit, minlength=n)
    n_all = np.bincount(pp, minlength=n)
    np.testing.assert_array_equal(unseen, rood & (2 * n_held >= n_all))


@pytest.mark.parametrize("target", [1, 40, 100, 300])
def test_choose_rood_reaches_the_unseen_target(target):
    pp, pc, n_visits, n_concepts = cohort()
    n = len(n_visits)
    opts = SplitOptions(rood_unseen_patients=target, seed=2)
    held, rood, unseen = choose_rood(pp, pc, n, n_concepts, opts, n_visits=n_visits)
    check_hold_out(pp, pc, n, held, rood, unseen)
    assert unseen.sum() >= target
    # the random codes are kept, and the extra ones are rare (at most max(3, n // 1000) patients)
    base, _, base_unseen = choose_rood(pp, pc, n, n_concepts, SplitOptions(rood_unseen_patients=0, seed=2))
    assert len(base) == 32 and set(base.tolist()) <= set(held.tolist())
    assert (np.bincount(pc, minlength=n_concepts)[held] <= max(3, n // 1000)).all()
    if target > base_unseen.sum():  # patients with a visit before the last one are preferred
        assert (n_visits[unseen & ~base_unseen] >= 2).mean() > max(0.7, (n_visits >= 2).mean() + 0.2)
    # no more codes than the target needs: none beyond the random ones when they reach it, else the last
    # code added crossed it
    if base_unseen.sum() >= target:
        assert held.tolist() == base.tolist()
    else:
        assert unseen.sum() < target + 10
    # the split assignment keeps every rood patient out of pretraining and fine-tuning
    split, _, _ = assign_splits(n_visits, rood, None, SplitOptions(**DEMO_SIZES))
    assert ((split == ROOD) == rood).all()


def test_choose_rood_stops_at_what_the_cohort_allows():
    pp, pc, n_visits, n_concepts = cohort(n=3000, n_codes=500, seed=5)
    n = len(n_visits)
    per_code = np.bincount(pc, minlength=n_concepts)
    all_rare = np.bincount(pp, weights=per_code[pc] > 3, minlength=n) == 0
    held, rood, unseen = choose_rood(
        pp, pc, n, n_concepts, SplitOptions(rood_unseen_patients=n, rood_max_patients=3), n_visits=n_visits
    )
    check_hold_out(pp, pc, n, held, rood, unseen)
    assert unseen.sum() < n and unseen[all_rare].all()  # every patient whose codes are all rare


def test_choose_rood_never_holds_out_special_tokens():
    pp, pc, n_visits, n_concepts = cohort(n=4000, n_codes=800, seed=7)
    n = len(n_visits)
    # a fifth of the patients also carry [UNK]-like special codes (ids 0..4), rare ones among them
    extra_p = np.arange(0, n, 5)
    sp = np.random.default_rng(0).integers(0, N_SPECIAL, len(extra_p)).astype(np.int32)
    sp[:3] = 4  # special id 4 occurs in only a few patients, like a rare code
    key = np.unique(np.concatenate([pp, extra_p]) * n_concepts + np.concatenate([pc, sp]))
    pp2, pc2 = key // n_concepts, (key % n_concepts).astype(np.int32)
    for opts in (
        SplitOptions(rood_unseen_patients=100, rood_min_patients=1, rood_max_patients=30, seed=1),
        SplitOptions(rood_codes=500),
    ):
        held, rood, unseen = choose_rood(pp2, pc2, n, n_concepts, opts, n_visits=n_visits)
        check_hold_out(pp2, pc2, n, held, rood, unseen)
        assert unseen.sum() >= unseen_target(opts, n)


def test_rood_off_and_default_target():
    pp, pc, n_visits, n_concepts = cohort(n=2000, seed=9)
    held, rood, unseen = choose_rood(pp, pc, 2000, n_concepts, SplitOptions(rood_codes=0), n_visits=n_visits)
    assert len(held) == 0 and not rood.any() and not unseen.any()
    assert unseen_target(SplitOptions(), 190_000) == 100
    assert unseen_target(SplitOptions(), 20_000) == 11
    assert unseen_target(SplitOptions(), 300) == 1
    assert unseen_target(SplitOptions(rood_unseen_patients=7), 300) == 7
    with pytest.raises(ValueError, match="rood.unseen.patients"):
        unseen_target(SplitOptions(rood_unseen_patients=-1), 300)


def test_rood_masks_of_a_given_list():
    pp = np.array([0, 0, 1, 1, 1, 2, 3], np.int64)
    pc = np.array([5, 6, 5, 7, 8, 9, 6], np.int32)
    rood, unseen = rood_masks(pp, pc, 5, np.array([5, 6, 40], np.int32))  # 40: no patient has it
    assert rood.tolist() == [True, True, False, True, False]
    assert unseen.tolist() == [True, False, False, True, False]  # patient 1: 1 of 3 codes held out


@pytest.mark.parametrize(
    ("kwargs", "option"),
    [
        ({"pretrain_val_fraction": 1.5}, "--pretrain-val-fraction"),
        ({"pretrain_val_fraction": -0.1}, "--pretrain-val-fraction"),
        ({"test": -1}, "--test"),
        ({"rood_codes": -3}, "--rood-codes"),
        ({"rood_min_patients": 0}, "--rood-min-patients"),
        ({"rood_min_patients": 5, "rood_max_patients": 2}, "--rood-max-patients"),
        ({"rood_unseen_patients": -1}, "--rood-unseen-patients"),
    ],
)
def test_split_options_out_of_range_name_the_option(kwargs, option):
    with pytest.raises(ValueError, match=f"^{option} must be"):
        SplitOptions(**kwargs)


def test_splits_that_leave_no_pretraining_patient_are_warned(caplog):
    n_visits = np.full(120, 2)
    with caplog.at_level("WARNING", logger="pipelines.data.splits"):
        split, _, used = assign_splits(n_visits, np.zeros(120, bool), None, SplitOptions(test=100_000))
    assert not (split == 0).any()
    assert "no patient is left for pretraining" in caplog.text and "--test" in caplog.text
