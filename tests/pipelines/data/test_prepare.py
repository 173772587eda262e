"""``prepare``: tokenization, splits, the ROOD hold-out, the dataset format 1, the CLI."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner
from ehr_fixtures import write_mimic

from ontology_compiler import compile_ontology
from ontology_compiler.icd import dotted_code
from pipelines.cli import main
from pipelines.data.dataset import verify_dataset
from pipelines.data.prepare import prepare
from pipelines.data.splits import SplitOptions
from pipelines.data.tokenize import tokenize
from pipelines.demo.cohort import generate_cohort
from pipelines.demo.defaults import demo_split_sizes
from pipelines.errors import DatasetExistsError, PipelineError

FIXTURE = Path(__file__).resolve().parents[2] / "data" / "snomed_mini_20220531"


@pytest.fixture(scope="module")
def program(tmp_path_factory):
    return compile_ontology(FIXTURE, out=tmp_path_factory.mktemp("programs")).path


@pytest.fixture(scope="module")
def prepared(program, tmp_path_factory):
    root = tmp_path_factory.mktemp("prep")
    ehr = generate_cohort(root / "ehr", n_patients=1500, seed=2, codes=program)
    (r,) = prepare(
        mimic=ehr,
        program=program,
        out=root / "datasets",
        splits=SplitOptions(rood_codes=3, rood_max_patients=120),
    )
    return r


def test_dataset_format_1(prepared, program):
    m = verify_dataset(prepared.path)
    assert m["program_id"] == json.loads((program / "manifest.json").read_text())["program_id"]
    assert {f["path"] for f in m["files"]} >= {
        "patients.parquet",
        "code_counts.parquet",
        "rood_codes.parquet",
    }
    assert m["source"]["kind"] == "mimic-iv" and len(m["source"]["inputs"]) == 3
    t = pq.read_table(prepared.path / "patients.parquet")
    assert t.schema.field("input_ids").type == pa.list_(pa.int32())
    assert t.schema.field("segment_ids").type == pa.list_(pa.int16())
    assert t.schema.field("chapters").type == pa.list_(pa.int8())
    assert t.schema.metadata[b"dataset_id"].decode() == prepared.dataset_id
    ids, segs = t["input_ids"].to_pylist(), t["segment_ids"].to_pylist()
    assert all(s[0] == 1 and 1 < len(s) <= 128 for s in ids)
    assert all(max(s) < 100 and s == sorted(s) for s in segs)
    lvs = t["last_visit_start"].to_pylist()
    assert all(
        segs[i][lvs[i]] == max(segs[i]) and (lvs[i] == 1 or segs[i][lvs[i] - 1] < max(segs[i]))
        for i in range(len(ids))
    )


def test_unknown_codes_counted_and_listed(prepared):
    m = prepared.manifest
    codes = m["counts"]["codes"]
    assert codes["unknown_code_rows"] > 0 and codes["unknown_codes_distinct"] == len(m["unknown_codes"])
    assert all({"vocabulary", "code", "occurrences", "patients"} <= set(u) for u in m["unknown_codes"])
    dropped = m["counts"]["patients"]["dropped"]
    assert m["counts"]["patients"]["kept"] + dropped["no_known_codes"] + dropped["no_diagnoses"] == 1500


def test_rood_patients_removed_from_every_other_split(prepared):
    t = pq.read_table(prepared.path / "patients.parquet").to_pydict()
    rood = pq.read_table(prepared.path / "rood_codes.parquet")
    held = set(rood["concept_id"].to_pylist())
    assert len(held) == 3
    for split, ids in zip(t["split"], t["input_ids"], strict=True):
        assert (split == "rood") == bool(held & set(ids))
    counts = pq.read_table(prepared.path / "code_counts.parquet").to_pydict()
    assert all(counts["count"][c] == 0 for c in held)
    by_split = prepared.manifest["counts"]["patients"]["by_split"]
    assert by_split["rood"] > 0 and by_split["finetune_train"] > 0 and by_split["test"] > 0


def test_finetune_patients_have_a_previous_visit(prepared):
    t = pq.read_table(prepared.path / "patients.parquet").to_pydict()
    for split, lvs in zip(t["split"], t["last_visit_start"], strict=True):
        if split in ("finetune_train", "finetune_val", "test"):
            assert lvs > 1


def test_prepare_again_is_a_noop_and_never_overwrites(prepared, program, tmp_path):
    ehr = Path(prepared.manifest["source"]["path"])
    out = prepared.path.parents[1]
    (again,) = prepare(
        mimic=ehr, program=program, out=out, splits=SplitOptions(rood_codes=3, rood_max_patients=120)
    )
    assert again.written is False and again.dataset_id == prepared.dataset_id
    other = tmp_path / "other"
    shutil.copytree(prepared.path, other / prepared.path.parent.name / prepared.dataset_id)
    (other / prepared.path.parent.name / prepared.dataset_id / "patients.parquet").write_bytes(b"x")
    with pytest.raises(DatasetExistsError):
        prepare(
            mimic=ehr, program=program, out=other, splits=SplitOptions(rood_codes=3, rood_max_patients=120)
        )


def test_tokenize_keeps_the_most_recent_visits():
    concepts = pa.table(
        {
            "concept_id": pa.array(range(5, 25), pa.int32()),
            "vocabulary": ["ICD10CM"] * 20,
            "code": [f"A{i:02d}" for i in range(20)],
        }
    )
    visits = [0, 0, 0, 1, 1, 2, 2, 2, 3]  # patient 7: 9 codes in 4 visits; patient 8: one 7-code visit
    ev = pa.table(
        {
            "subject_id": pa.array([7] * 9 + [8] * 7, pa.int64()),
            "visit_index": pa.array(visits + [0] * 7, pa.int32()),
            "visit_time": pa.array([None] * 16, pa.timestamp("us")),
            "seq": pa.array(range(16), pa.int32()),
            "vocabulary": ["ICD10CM"] * 15 + ["ICD9CM"],
            "code": [f"A{i:02d}" for i in range(15)] + ["9999"],
        }
    )
    tok = tokenize(ev, concepts, max_len=6)
    seq7 = tok.input_ids[tok.offsets[0] : tok.offsets[1]].tolist()
    assert seq7 == [1, 5 + 5, 5 + 6, 5 + 7, 5 + 8]  # visits 2 and 3 fit in 5 codes; visit 1 would not
    assert tok.segment_ids[tok.offsets[0] : tok.offsets[1]].tolist() == [0, 0, 0, 0, 1]
    assert tok.last_visit_start.tolist()[0] == 4
    seq8 = tok.input_ids[tok.offsets[1] : tok.offsets[2]].tolist()
    assert seq8 == [1, 14, 15, 16, 17, 18]  # an over-long last visit keeps its first codes
    assert tok.counts["unknown_code_rows"] == 1 and tok.unknown["code"].to_pylist() == ["9999"]
    assert tok.truncated.tolist() == [True, True]


def test_cli_prepare_mimic_fixture(program, tmp_path):
    ehr = write_mimic(tmp_path / "mimic")
    res = CliRunner().invoke(
        main,
        [
            "prepare",
            "--mimic",
            str(ehr),
            "--program",
            str(program),
            "--out",
            str(tmp_path / "ds"),
            "--rood-codes",
            "0",
        ],
    )
    assert res.exit_code == 0, res.output
    assert "dropped {'no_diagnoses': 1" in res.output
    (path,) = (tmp_path / "ds").glob("*/*")
    m = verify_dataset(path)
    assert {(u["vocabulary"], u["code"]) for u in m["unknown_codes"]} >= {
        ("ICD10CM", "ZZZ99"),
        ("ICD9CM", "4019"),
    }
    t = pq.read_table(path / "patients.parquet").to_pydict()
    assert t["subject_id"] == [1, 2, 3, 5, 6] and t["mortality_6m"] == [True, True, False, False, False]


def test_cli_reports_bad_input(program, tmp_path):
    ehr = write_mimic(tmp_path / "mimic")
    (ehr / "hosp" / "patients.csv.gz").unlink()
    res = CliRunner().invoke(
        main, ["prepare", "--mimic", str(ehr), "--program", str(program), "--out", str(tmp_path)]
    )
    assert res.exit_code != 0 and "patients.csv.gz" in res.output


def test_prepare_demo_small(tmp_path):
    from pipelines.demo.prepare import prepare_demo

    results = prepare_demo(
        size="small",
        n_patients=300,
        artifacts=tmp_path,
        out=tmp_path / "ds",
        splits=SplitOptions(rood_codes=4),
    )
    assert [r.manifest["name"] for r in results] == ["demo-mimic", "demo-eicu"]
    for r in results:
        verify_dataset(r.path)
        assert r.manifest["counts"]["patients"]["kept"] > 0
        assert 0 < r.manifest["counts"]["codes"]["unknown_code_share"] < 0.2
    assert np.isfinite(results[0].manifest["counts"]["codes"]["log_frequency_min"])
    assert results[0].manifest["counts"]["rood"]["selection"] in ("chosen", "hold_out_file")
    # the demo's split sizes by default, scaled down to this cohort
    (ehr,) = (tmp_path / "ehr").glob("demo-*")
    reserved = ehr / "ground_truth" / "reserved_codes.parquet"
    if not reserved.exists():  # a cohort from before the reserved codes: give it two of its codes
        count = pq.read_table(results[0].path / "code_counts.parquet")["count"].to_numpy()
        rows = pq.read_table(Path(results[0].manifest["program"]["path"]) / "concepts.parquet")
        rows = rows.take(pa.array(np.flatnonzero(count > 0)[:2]))
        pq.write_table(rows.select(["vocabulary", "code"]), reserved)
    demo = prepare_demo(size="small", n_patients=300, artifacts=tmp_path, out=tmp_path / "ds")
    for r in demo:
        used = r.manifest["options"]["sizes_used"]
        by_split = r.manifest["counts"]["patients"]["by_split"]
        wanted = demo_split_sizes(300)["finetune_train"]  # the demo's sizes scaled to the cohort
        assert used.get("finetune_train_requested", wanted) == wanted
        assert used["finetune_train"] == by_split["finetune_train"] <= wanted
        assert by_split["pretrain_train"] > 0
        rood = r.manifest["counts"]["rood"]
        assert rood["selection"] == "hold_out_file" and rood["hold_out_file"] == str(reserved.resolve())
        assert rood["patients"] == by_split["rood"]


# ------------------------------------------------------------------------------------------ hold-out file


def rare_codes(prepared, program, k: int = 2) -> tuple[list[int], list[str], list[str]]:
    """The ``k`` concepts the prepared cohort's pretraining has least often: ids, vocabularies,
    dotless codes."""
    count = pq.read_table(prepared.path / "code_counts.parquet")["count"].to_numpy()
    seen = np.flatnonzero(count > 0)
    ids = np.sort(seen[np.argsort(count[seen], kind="stable")[:k]])
    assert len(ids) == k
    rows = pq.read_table(program / "concepts.parquet").take(pa.array(ids))
    return ids.tolist(), rows["vocabulary"].to_pylist(), rows["code"].to_pylist()


def test_hold_out_file_is_the_rood_split(prepared, program, tmp_path, caplog):
    ids, vocs, codes = rare_codes(prepared, program)
    listed = [
        f"{v},{dotted_code(c, v) if i % 2 else c}" for i, (v, c) in enumerate(zip(vocs, codes, strict=True))
    ]
    hold = tmp_path / "hold.csv"  # dotted and dotless codes, two unknown codes and a special token
    hold.write_text(
        "vocabulary,code\n" + "\n".join([*listed, "ICD10CM,Q99.99X", "ICD-9-CM,0000", "SPECIAL,[UNK]"])
    )
    ehr = Path(prepared.manifest["source"]["path"])
    with caplog.at_level("WARNING"):
        (r,) = prepare(
            mimic=ehr,
            program=program,
            out=tmp_path / "ds",
            hold_out=hold,
            splits=SplitOptions(rood_codes=3, rood_max_patients=120),
        )
    assert "3 of 5 codes to hold out are not codes of program" in caplog.text and str(hold) in caplog.text
    assert r.dataset_id != prepared.dataset_id
    rood = r.manifest["counts"]["rood"]
    assert rood["selection"] == "hold_out_file" and rood["hold_out_file"] == str(hold.resolve())
    assert (rood["held_out_codes"], rood["held_out_codes_in_cohort"], rood["hold_out_rows"]) == (2, 2, 5)
    assert rood["hold_out_unresolved"] == 3
    assert {"role": "hold_out", "path": str(hold.resolve())}.items() <= r.manifest["source"]["inputs"][
        -1
    ].items()
    assert sorted(pq.read_table(r.path / "rood_codes.parquet")["concept_id"].to_pylist()) == ids
    t = pq.read_table(r.path / "patients.parquet").to_pydict()
    held = set(ids)
    for split, seq, unseen in zip(t["split"], t["input_ids"], t["rood_unseen"], strict=True):
        assert (split == "rood") == bool(held & set(seq))
        assert not unseen or split == "rood"
    assert rood["patients"] == t["split"].count("rood") > 0 and rood["unseen_patients"] == sum(
        t["rood_unseen"]
    )
    assert pq.read_table(r.path / "code_counts.parquet")["count"].to_numpy()[ids].sum() == 0
    # the same codes as Parquet: another file, another id, the same split
    pq.write_table(pa.table({"vocabulary": vocs, "code": codes}), tmp_path / "hold.parquet")
    (r2,) = prepare(
        mimic=ehr,
        program=program,
        out=tmp_path / "ds",
        hold_out=tmp_path / "hold.parquet",
        splits=SplitOptions(rood_codes=3, rood_max_patients=120),
    )
    assert r2.dataset_id != r.dataset_id and r2.manifest["counts"]["rood"]["hold_out_unresolved"] == 0
    t2 = pq.read_table(r2.path / "patients.parquet").to_pydict()
    assert [s == "rood" for s in t2["split"]] == [s == "rood" for s in t["split"]]


def test_hold_out_file_errors_name_the_file(prepared, program, tmp_path):
    ehr = Path(prepared.manifest["source"]["path"])
    none_known = tmp_path / "unknown.csv"
    none_known.write_text("vocabulary,code\nICD10CM,Q99.99X\n")
    no_column = tmp_path / "nocol.csv"
    no_column.write_text("system,code\nICD10CM,A01\n")
    for f, msg in ((none_known, "none of the 1 codes to hold out"), (no_column, "lacks column.*vocabulary")):
        with pytest.raises(PipelineError, match=f"{f.name}.*{msg}"):
            prepare(mimic=ehr, program=program, out=tmp_path / "ds", hold_out=f)
    with pytest.raises(PipelineError, match="missing.parquet: hold-out file not found"):
        prepare(mimic=ehr, program=program, out=tmp_path / "ds", hold_out=tmp_path / "missing.parquet")
    assert not any((tmp_path / "ds").glob("*/*"))


def test_chosen_hold_out_reaches_its_unseen_target(prepared):
    rood = prepared.manifest["counts"]["rood"]
    assert rood["selection"] == "chosen" and rood["unseen_target"] == 1  # 100 per 190k of < 1500, at least 1
    assert rood["unseen_patients"] >= 1 and rood["held_out_codes"] >= 3
    assert rood["patients"] == prepared.manifest["counts"]["patients"]["by_split"]["rood"]
    t = pq.read_table(prepared.path / "patients.parquet").to_pydict()
    assert (
        sum(t["rood_unseen"])
        == rood["unseen_patients"]
        == prepared.manifest["counts"]["patients"]["rood_unseen"]
    )
    assert prepared.manifest["generator"] == "pipelines.prepare/4"


def test_cli_prepare_hold_out(program, tmp_path):
    ehr = write_mimic(tmp_path / "mimic")
    hold = tmp_path / "hold.csv"
    hold.write_text("vocabulary,code\nICD10CM,I10\n")
    res = CliRunner().invoke(
        main,
        [
            "prepare",
            "--mimic",
            str(ehr),
            "--program",
            str(program),
            "--out",
            str(tmp_path / "ds"),
            "--hold-out",
            str(hold),
        ],
    )
    assert res.exit_code == 0, res.output
    assert "rood      1 held-out codes from" in res.output
    (path,) = (tmp_path / "ds").glob("*/*")
    m = verify_dataset(path)
    assert m["counts"]["rood"]["hold_out_file"] == str(hold.resolve())
