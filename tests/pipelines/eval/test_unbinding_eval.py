"""The unbinding recall of ``hrrbert evaluate`` (:func:`pipelines.eval.registry.unbinding_study`) and its
table in the experiment report."""

from __future__ import annotations

import types
from pathlib import Path

import numpy as np
import pytest
import torch
from train_fixtures import program_dir  # noqa: F401

from hrr_kernel import hrr_vectors, load_program, unbinding_recall
from model import HRRBert, preset
from pipelines.eval.pretrained import summary_lines
from pipelines.eval.records import UnbindingRecall
from pipelines.eval.registry import unbinding_study
from pipelines.eval.sections import SectionInputs, unbinding_section


def _unbinding_section(exp) -> list[str]:
    """The report's unbinding section of an experiment whose runs carry these evaluation records."""
    recs = {
        k: [UnbindingRecall.from_dict(r.evaluation) for r in runs] for k, runs in exp.configurations.items()
    }
    return unbinding_section(SectionInputs(exp, recs, Path("plots")))


def _model(program, mode: str) -> HRRBert:
    torch.manual_seed(0)
    return HRRBert(preset("tiny", mode=mode, max_len=8, max_segments=4), program)


@pytest.mark.parametrize("mode", ["base", "add", "cat"])
def test_unbinding_study_samples_icd_rows_and_scores_their_edges(program_dir, mode):  # noqa: F811
    program = load_program(program_dir)
    model = _model(program, mode)
    icd = [i for i, v in enumerate(program.concept_vocabularies) if v.startswith("ICD")]
    got = unbinding_study(model, 5, seed=3)
    assert got["rows"] == 5 and got["dim"] == (32 if mode == "cat" else 64) and got["ks"] == [1, 5]
    rows = np.sort(np.random.default_rng(3).choice(np.array(icd), 5, replace=False))
    ids = torch.as_tensor(rows)
    token = model.embeddings.token
    ref = unbinding_recall(
        program, hrr_vectors(token, ids), token.atoms.detach(), token.relations.detach(), ids
    )
    assert got["edges"] == ref.edges > 0
    assert got["recall"] == {"1": ref.recall[1], "5": ref.recall[5]}
    kinds = {"is_a", "attribute", "description", "icd_hierarchy"}
    assert set(got["per_kind"]) <= kinds  # ICD rows: no identity edges
    labels = set(program.relation_labels)
    assert set(got["per_relation"]) <= labels
    assert sum(v["edges"] for v in got["per_relation"].values()) == got["edges"]
    everything = unbinding_study(model, 10_000, seed=0)
    assert everything["rows"] == len(icd)


def test_summary_and_report_show_the_recall():
    u = {
        "rows": 500,
        "edges": 5630,
        "dim": 128,
        "recall": {"1": 0.08, "5": 0.16},
        "per_kind": {
            "attribute": {"edges": 1037, "recall": {"1": 0.24, "5": 0.41}},
            "description": {"edges": 3923, "recall": {"1": 0.03, "5": 0.08}},
            "is_a": {"edges": 670, "recall": {"1": 0.14, "5": 0.23}},
        },
    }
    record = {"model": "m", "mode": "base", "unbinding_recall": u, "config": {"out": "o"}}
    line = next(ln for ln in summary_lines(record) if ln.startswith("unbinding"))
    assert "500 codes, 5630 edges (H=128): top-1 0.080, top-5 0.160" in line and "is_a 0.230" in line
    seed1 = dict(u, recall={"1": 0.10, "5": 0.20})
    run = types.SimpleNamespace
    exp = types.SimpleNamespace(
        configurations={
            "unstructured": [run(evaluation={})],
            "base": [run(evaluation={"unbinding_recall": u}), run(evaluation={"unbinding_recall": seed1})],
        }
    )
    text = "\n".join(_unbinding_section(exp))
    assert text.startswith("## Unbinding recall")
    assert "| configuration | dimension | codes | edges | top-1 | top-5 | top-5 is-a |" in text
    assert "| base | 128 | 1000 | 11260 | 0.090 | 0.180 | 0.230 | 0.410 | 0.080 |" in text
    assert "| unstructured |" not in text
    assert (
        _unbinding_section(types.SimpleNamespace(configurations={"unstructured": [run(evaluation={})]})) == []
    )
