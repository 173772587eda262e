"""The evaluation registry: each evaluation declared once (name, config fields, typed record, run, report
section), the fields its run reads are the ones it declares, and the records read and write
``evaluation.json`` under the keys it always had."""

from __future__ import annotations

import ast
import dataclasses
import inspect
import textwrap

import pytest
import torch
from train_fixtures import program_dir  # noqa: F401

from pipelines.eval import records as R
from pipelines.eval.config import EvaluateConfig
from pipelines.eval.registry import EVALUATIONS, RunInputs

# fields an evaluation declares but reads through RunInputs (the datasets evaluate_pretrained loads first)
READ_AS_INPUTS = {"transfer_dataset", "labels_dataset"}


def test_each_evaluation_is_declared_once_with_fields_of_the_config():
    names = [e.name for e in EVALUATIONS]
    assert len(set(names)) == len(names)
    config_fields = {f.name for f in dataclasses.fields(EvaluateConfig)}
    for ev in EVALUATIONS:
        assert set(ev.fields) <= config_fields, ev.name
        assert ev.record.KEY == ev.name and dataclasses.is_dataclass(ev.record), ev.name
    # the report's order of the sections, after the masked-code (10) and test-split task (20) sections
    placed = sorted((e for e in EVALUATIONS if e.section), key=lambda e: e.position)
    assert [e.name for e in placed] == [
        "transfer",
        "rood",
        "chapters_probe",
        "next_visit",
        "frequency_bins",
        "neighbours",
        "unbinding_recall",
        "tsne",
        "cost",
    ]
    assert all(e.position > 20 for e in placed) and len({e.position for e in placed}) == len(placed)


def _cfg_reads(fn) -> set[str]:
    """The ``<inputs>.cfg.<field>`` attributes a run function reads."""
    tree = ast.parse(textwrap.dedent(inspect.getsource(fn)))
    return {
        n.attr
        for n in ast.walk(tree)
        if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Attribute) and n.value.attr == "cfg"
    }


@pytest.mark.parametrize("ev", EVALUATIONS, ids=lambda e: e.name)
def test_a_run_reads_exactly_the_fields_it_declares(ev):
    reads = _cfg_reads(ev.run)
    assert reads <= set(ev.fields), f"{ev.name} reads {sorted(reads - set(ev.fields))} without declaring them"
    assert set(ev.fields) - reads <= READ_AS_INPUTS, f"{ev.name} declares {sorted(set(ev.fields) - reads)}"


def test_a_run_sees_only_its_fields():
    cfg = EvaluateConfig(pretrained="p", dataset="d", program="g", out="o", per_bin=7)
    ev = next(e for e in EVALUATIONS if e.name == "frequency_bins")
    base = RunInputs(cfg, None, None, None, None, None, "cpu", None, "x")
    view = ev.inputs(base, cfg).cfg
    assert view.per_bin == 7
    with pytest.raises(AttributeError, match="'frequency_bins' reads 'tsne_points'"):
        _ = view.tsne_points


FULL = {
    "frequency_bins": [{"low": -14.0, "high": -12.0, "codes_in_bin": 3, "probes": 2, "top10": 0.5,
                        "top100": 1.0, "median_rank": 4.0, "ranked": 31}],
    "neighbours": {"k": 4, "groups": {"rare": {"related": 1, "total": 4, "codes": [
        {"code": "A (ICD-10)", "title": "a",
         "neighbours": [{"code": "B (ICD-10)", "title": "b", "related": True}]}]}}},
    "unbinding_recall": {"ks": [1, 5], "rows": 5, "rows_with_edges": 5, "edges": 9, "exact": False,
                         "memory": "role", "recall": {"1": 0.1, "5": 0.3},
                         "per_kind": {"is_a": {"edges": 4, "recall": {"1": 0.0, "5": 0.5}}},
                         "per_relation": {"is a": {"edges": 4, "recall": {"1": 0.0, "5": 0.5}}}, "dim": 64,
                         "sample": {"vocabularies": "ICD*", "seed": 0, "asked": 5}},
    "tsne": {"path": "tsne.png", "points": 20, "perplexity": 5.0, "coloured_by": "chapter", "rare_marked": 2},
    "rood": [{"trial": 0, "model": "m", "rood": {"f1": 0.5, "n": 4}, "rood_unseen": {"n": 0}}],
    "transfer": [{"trial": 0, "model": "m", "test": {"f1": 0.4, "n": 12}}],
    "transfer_dataset_id": "d2",
    "chapters_probe": {"features": {"width": 256, "parts": ["[CLS] state"]}, "choice": {"C": 0.1},
                       "patients": {"finetune_train": 24, "finetune_val": 12},
                       "scores": {"test": {"f1": 0.4, "n": 12, "f1_interval": {"estimate": 0.4, "low": 0.3,
                                                                               "high": 0.5, "n": 12,
                                                                               "method": "m"}}},
                       "seconds": 1.5},
    "next_visit": {"ks": [10, 20, 30], "categories": 9, "patients": {"test": {"patients": 3, "kept": 2}},
                   "head": {"outputs": 4, "best_epoch": 2},
                   "quintiles": [{"quintile": 1, "categories": 1, "low": 0, "high": 0}],
                   "scores": {"model": {"test": {"n": 2, "recall": {"20": 0.5}, "pooled": {"20": 0.25},
                                                 "quintiles": {"20": [0.5, None, None, None, None]},
                                                 "intervals": {"recall@20": {"estimate": 0.5, "low": 0.0,
                                                                             "high": 1.0, "n": 2,
                                                                             "method": "m"}}}}},
                   "differences": {"test": {"model - history": {"estimate": 0.1, "low": None, "high": None,
                                                                "n": 2, "method": "m"}}},
                   "ceiling": False, "ceiling_note": "none"},
    "cost": {"embedding_build_s": 0.1, "step_s": 0.2, "build_share": 0.5, "tokens_per_s": 10.0,
             "sequences_per_s": 1.0, "batch": 2, "peak_memory_mb": 9.0, "device": "cpu",
             "training_seq_per_s": None},
}  # fmt: skip


def test_records_write_back_the_keys_they_read():
    out = {}
    for ev in EVALUATIONS:
        rec = ev.record.from_dict(FULL)
        if ev.name == "labels":
            assert rec is None  # not in this evaluation
            continue
        out.update(rec.to_dict())
    assert out == FULL and list(out) == list(FULL)  # same keys, same order


def test_records_of_older_files_read_missing_keys_as_defaults():
    ev = {"frequency_bins": [{"low": -2.0, "high": 0.0, "probes": 0, "top10": None, "top100": None}],
          "neighbours": {"groups": {"rare": {"related": 2, "total": 8}}}, "tsne": {"path": "tsne.png"},
          "cost": {"step_s": 0.1}, "unbinding_recall": {}}  # fmt: skip
    b = R.FrequencyBins.from_dict(ev).bins[0]
    assert (b.codes_in_bin, b.median_rank, b.ranked) == (0, None, None)
    nb = R.Neighbours.from_dict(ev)
    assert (nb.group("rare").related, nb.group("common").total, nb.group("rare").codes) == (2, 0, [])
    assert R.TSNE.from_dict(ev).coloured_by is None and R.CostRecord.from_dict(ev).device == ""
    assert R.UnbindingRecall.from_dict(ev) is None  # an empty record is none
    assert (
        R.Rood.from_dict(ev) is None
        and R.Transfer.from_dict(ev) is None
        and R.LabelTask.from_dict(ev) is None
    )


def test_unbinding_is_skipped_for_a_table_embedding(program_dir):  # noqa: F811
    from hrr_kernel import load_program
    from model import HRRBert, preset

    program = load_program(program_dir)
    ev = next(e for e in EVALUATIONS if e.name == "unbinding_recall")
    cfg = EvaluateConfig(pretrained="p", dataset="d", program="g", out="o", unbinding_rows=3)
    got = {}
    for mode in ("unstructured", "base"):
        torch.manual_seed(0)
        model = HRRBert(preset("tiny", mode=mode, max_len=8, max_segments=4), program)
        got[mode] = ev.run(
            ev.inputs(RunInputs(cfg, model, program, None, None, None, "cpu", None, mode), cfg)
        )
    assert got["unstructured"] is None
    assert isinstance(got["base"], R.UnbindingRecall) and got["base"].rows == 3 and got["base"].dim > 0
