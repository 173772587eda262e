"""The next-visit evaluation: top-k recall and the per-quintile recall on hand-computed examples, each
baseline on a hand-built case, the ceiling read from a ground-truth file, the head on the frozen encoder of
a tiny model on the fixture dataset (through the registry), the record's round trip and the report's
section."""

from __future__ import annotations

import json
from types import SimpleNamespace

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import scipy.sparse as sp
import torch
from train_fixtures import dataset_dir, program_dir  # noqa: F401

from pipelines.data.next_visit import CategorySpace, NextVisitSet, VisitCategories
from pipelines.data.sequences import TokenizedDataset
from pipelines.errors import InputFileError
from pipelines.eval import next_visit_baselines as B
from pipelines.eval import records as R
from pipelines.eval.config import EvaluateConfig
from pipelines.eval.next_visit_report import next_visit_section
from pipelines.eval.next_visit_scores import frequency_quintiles, hits, paired_difference, scores
from pipelines.eval.registry import EVALUATIONS, RunInputs
from pipelines.eval.sections import SectionInputs


def _csr(rows: list[list[int]], c: int) -> sp.csr_matrix:
    r = [i for i, x in enumerate(rows) for _ in x]
    return sp.csr_matrix(
        (np.ones(len(r), np.float32), (r, [j for x in rows for j in x])), shape=(len(rows), c)
    )


# three patients, six categories: true sets {0, 1}, {2}, {3, 4, 5}
TARGET = _csr([[0, 1], [2], [3, 4, 5]], 6)
RANKED = np.array([[0, 2, 1], [1, 2, 0], [3, 3, -1]])  # a repeat counts once, -1 pads
COUNT = np.array([50, 40, 30, 20, 10, 0])  # pretraining visits of each category


def test_recall_at_k_averaged_over_patients_and_pooled():
    q = frequency_quintiles(TARGET, COUNT)
    h = hits(RANKED, TARGET, q, ks=(1, 2, 3))
    assert [h.found[k].tolist() for k in (1, 2, 3)] == [[1, 0, 1], [1, 1, 1], [2, 1, 1]]
    s = scores(h, ks=(1, 2, 3), intervals=False)
    assert s["recall"]["1"] == pytest.approx((1 / 2 + 0 + 1 / 3) / 3)
    assert s["recall"]["2"] == pytest.approx((1 / 2 + 1 + 1 / 3) / 3)
    assert s["recall"]["3"] == pytest.approx((1 + 1 + 1 / 3) / 3)
    assert [s["pooled"][k] for k in ("1", "2", "3")] == pytest.approx([2 / 6, 3 / 6, 4 / 6])


def test_quintiles_of_the_target_categories_and_their_recall():
    q = frequency_quintiles(TARGET, COUNT)
    # six categories by count: {5, 4} (0-10), {3} (20), {2} (30), {1} (40), {0} (50)
    assert q.group.tolist() == [4, 3, 2, 1, 0, 0]
    assert [(x["categories"], x["low"], x["high"]) for x in q.as_list()] == [
        (2, 0, 10), (1, 20, 20), (1, 30, 30), (1, 40, 40), (1, 50, 50)]  # fmt: skip
    h = hits(RANKED, TARGET, q, ks=(2,))
    s = scores(h, ks=(2,), intervals=False)
    # at k = 2: Q1's 4 and 5 missed, 3 found, 2 found, 1 missed, 0 found
    assert s["quintiles"]["2"] == [0.0, 1.0, 1.0, 0.0, 1.0]
    # a category that is no target of the scored patients is in no quintile; an empty quintile reads None
    q2 = frequency_quintiles(_csr([[0], [1]], 6), COUNT)
    assert q2.group.tolist() == [1, 0, -1, -1, -1, -1] and q2.categories == [1, 1, 0, 0, 0]
    assert scores(hits(RANKED[:2], _csr([[0], [1]], 6), q2, ks=(2,)), ks=(2,), intervals=False)["quintiles"][
        "2"
    ] == [1.0, 1.0, None, None, None]


def test_intervals_and_paired_differences_resample_patients():
    rng = np.random.default_rng(0)
    n, c = 60, 40
    target = _csr([sorted(rng.choice(c, 3, replace=False).tolist()) for _ in range(n)], c)
    good = np.stack([np.r_[target[i].indices, np.setdiff1d(np.arange(c), target[i].indices)][:30]
                     for i in range(n)])  # fmt: skip
    bad = np.tile(np.arange(30), (n, 1))
    q = frequency_quintiles(target, rng.integers(0, 100, c))
    hg, hb = hits(good, target, q), hits(bad, target, q)
    s = scores(hg)
    iv = s["intervals"]["recall@20"]
    assert s["recall"]["20"] == iv["estimate"] == 1.0 and iv["low"] == iv["high"] == 1.0
    assert {"recall@10", "pooled@30", "q1@20", "q5@20"} <= set(s["intervals"])
    sb = scores(hb)["intervals"]["recall@10"]
    assert sb["low"] <= sb["estimate"] <= sb["high"] and sb["low"] < sb["high"]
    d = paired_difference(hg, hb)
    assert d.estimate == pytest.approx(1.0 - hb.recall(20)(np.arange(n))) and d.low <= d.estimate <= d.high


def test_frequency_prior_and_history_baselines():
    prior = B.prior_counts(_csr([[1, 2], [2], [2, 3], [3, 4], [2, 3]], 5))
    assert prior.tolist() == [0, 1, 4, 3, 1]
    assert B.prior_ranking(prior, 2, 5).tolist() == [[2, 3, 1, 4, 0]] * 2  # ties by index
    # patient A: 0 at two visits (latest 2), 1 at one (latest 3), 3 at one (latest 1); patient B: 4 and 2
    # at one visit each, as recent: ties by the prior; then the prior tops both up
    visits = sp.csr_matrix(np.array([[2, 1, 0, 1, 0], [0, 0, 1, 0, 1]], np.float32))
    last = sp.csr_matrix(np.array([[2, 3, 0, 1, 0], [0, 0, 1, 0, 1]], np.float32))
    s = NextVisitSet("test", np.array([1, 2]), _csr([[0], [1]], 5), visits, last, np.ones(2, bool))
    assert B.history_ranking(s, prior, 5).tolist() == [[0, 1, 3, 2, 4], [2, 4, 3, 1, 0]]


def test_cooccurrence_baseline_counts_consecutive_visits():
    # patient 0: visits {0, 1}, {1, 2}, {2}; patient 1: {0}, {2}
    entries = [(0, 0, 0), (0, 0, 1), (0, 1, 1), (0, 1, 2), (0, 2, 2), (1, 0, 0), (1, 1, 2)]
    p, v, c = (np.array(x) for x in zip(*entries, strict=True))
    vc = VisitCategories(np.array([10, 11]), p, v, c, np.zeros(len(p), bool))
    m = B.transition_matrix(vc, 3).toarray()
    # visits followed by another: holding 0 twice, 1 twice, 2 once
    assert m.tolist() == [[0, 0.5, 1.0], [0, 0.5, 1.0], [0, 0, 1.0]]
    prior = np.array([10.0, 0.0, 0.0])
    hist = sp.csr_matrix(np.array([[1, 0, 0], [0, 0, 0]], np.float32))
    s = NextVisitSet("test", np.array([1, 2]), _csr([[2], [0]], 3), hist, hist, np.ones(2, bool))
    # history {0}: 2 (1.0) before 1 (0.5) before 0; no history: the prior, ties by index
    assert B.cooccurrence_ranking(s, sp.csr_matrix(m), prior, 3).tolist() == [[2, 1, 0], [0, 1, 2]]


def test_ceiling_reads_the_truest_categories_of_each_patient(tmp_path):
    space = CategorySpace.of_program(["ICD10CM", "ICD10CM", "ICD9CM"], ["I10", "E119", "4019"])
    rows = [("mimic-iv", 7, "ICD10CM:E11", 0.2), ("mimic-iv", 7, "ICD10CM:I10", 0.9),
            ("mimic-iv", 7, "ICD10CM:Z99", 0.5), ("mimic-iv", 8, "ICD9CM:401", 0.4),
            ("eicu", 7, "ICD9CM:401", 1.0)]  # fmt: skip
    h, s, c, p = zip(*rows, strict=True)
    pq.write_table(
        pa.table({"hospital": h, "subject_id": pa.array(s, pa.int64()), "category": c, "probability": p}),
        tmp_path / B.CEILING_FILE,
    )
    got = B.ceiling_ranking(tmp_path, "mimic-iv", np.array([8, 7]), space, 3)
    i10, e11, d401 = space.index(["ICD10CM:I10", "ICD10CM:E11", "ICD9CM:401"]).tolist()
    assert got.tolist() == [[d401, -1, -1], [i10, e11, -1]]  # Z99: no category of the space
    with pytest.raises(InputFileError, match="1 patient"):
        B.ceiling_ranking(tmp_path, "mimic-iv", np.array([9]), space, 3)
    with pytest.raises(InputFileError, match="missing"):
        B.ceiling_ranking(tmp_path / "none", "mimic-iv", np.array([7]), space, 3)


def _run(program_dir, dataset_dir, tmp_path, **cfg):  # noqa: F811
    from hrr_kernel import load_program
    from model import HRRBert, preset

    program = load_program(program_dir)
    torch.manual_seed(0)
    model = HRRBert(preset("tiny", mode="base", max_len=64, max_segments=8), program).eval()
    ds = TokenizedDataset(dataset_dir, program.program_id, program.n_concepts, model.pad_id)
    ev = next(e for e in EVALUATIONS if e.name == "next_visit")
    c = EvaluateConfig(pretrained="p", dataset="d", program="g", out=str(tmp_path), **cfg)
    return ev.run(
        ev.inputs(RunInputs(c, model, program, ds, None, ds, torch.device("cpu"), tmp_path, "x"), c)
    )


def test_the_evaluation_on_the_fixture_dataset(program_dir, dataset_dir, tmp_path, one_thread):  # noqa: F811
    rec = _run(program_dir, dataset_dir, tmp_path, next_visit_epochs=3)
    assert isinstance(rec, R.NextVisit) and rec.ks == [10, 20, 30]
    assert set(rec.scores) == {"model", "frequency_prior", "history", "cooccurrence"}  # no ground truth
    assert not rec.ceiling and "no ground truth" in rec.ceiling_note
    test = rec.score("model", "test")
    assert test.n == 12 and set(test.recall) == {"10", "20", "30"}
    assert 0 <= test.recall["10"] <= test.recall["20"] <= test.recall["30"] <= 1
    assert test.intervals["recall@20"]["method"].startswith("patient bootstrap")
    assert rec.score("model", "rood_unseen") is None  # the fixture marks no ROOD-unseen patient
    assert rec.head["train_patients"] == 24 and rec.head["epochs_run"] <= 3 and rec.head["outputs"] > 0
    assert rec.patients["test"]["kept"] == 12 and len(rec.quintiles) == 5
    assert set(rec.differences["test"]) == {
        "model - frequency_prior",
        "model - history",
        "model - cooccurrence",
    }
    # the record round-trips through evaluation.json
    d = json.loads(json.dumps(rec.to_dict()))
    back = R.NextVisit.from_dict(d)
    assert back == rec and back.to_dict() == d
    assert R.NextVisit.from_dict({}) is None
    # switched off
    assert _run(program_dir, dataset_dir, tmp_path, next_visit_epochs=0) is None


def test_the_report_section_reads_the_records(program_dir, dataset_dir, tmp_path, one_thread):  # noqa: F811
    rec = _run(program_dir, dataset_dir, tmp_path, next_visit_epochs=2)
    exp = SimpleNamespace(configurations={"base": [SimpleNamespace(seed=0)], "unstructured": []})
    results: dict = {}
    lines = next_visit_section(SectionInputs(exp, {"base": [rec], "unstructured": []}, tmp_path, results))
    text = "\n".join(lines)
    assert text.startswith("## Next-visit diagnoses (top-k recall, 12 test patients)")
    assert "| base | 1 |" in text and "| baseline: history's categories | – |" in text
    assert "No ceiling: no ground truth given" in text and "base − history's categories" in text
    nv = results["next_visit"]
    assert nv["configurations"]["base"]["recall@20"]["estimate"] == pytest.approx(
        rec.score("model", "test").recall["20"]
    )
    assert (
        set(nv["baselines"]) == {"frequency_prior", "history", "cooccurrence"} and len(nv["quintiles"]) == 5
    )
    assert next_visit_section(SectionInputs(exp, {"base": [None]}, tmp_path, {})) == []
