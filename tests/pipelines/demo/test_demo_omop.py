"""The demo's cohort as an OMOP CDM beside its MIMIC-IV and eICU layouts (``ensure_omop``, run by
``prepare_demo``), and the OHDSI path end to end on it: the Athena download compiles to SNOMED-concept
tokens, ``prepare --omop --omop-codes standard`` tokenizes the cohort's standard concepts, and a model
pretrains and fine-tunes on them."""

from __future__ import annotations

import hashlib

import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

from ontology_compiler.api import compile_source
from pipelines.cli import main
from pipelines.data.prepare import prepare
from pipelines.data.splits import SplitOptions
from pipelines.demo.cohort_write_omop import TABLES
from pipelines.demo.prepare import prepare_demo


def _digests(folder) -> dict[str, str]:
    return {
        str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(folder.rglob("*"))
        if p.is_file()
    }


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    root = tmp_path_factory.mktemp("demo_omop")
    prepare_demo(size="small", n_patients=300, artifacts=root, out=root / "ds")
    (ehr,) = (root / "ehr").glob("demo-*")
    return root, ehr


def test_the_cohort_is_written_in_omop_once(demo):
    root, ehr = demo
    assert {p.name for p in ehr.iterdir()} >= {"hosp", "icu", "eicu", "ground_truth", "omop", "athena"}
    assert {f"{t}.csv" for t in TABLES} == {p.name for p in (ehr / "omop").iterdir()}
    assert (ehr / "athena" / "CONCEPT.csv").is_file() and (ehr / "athena" / "CONCEPT_ANCESTOR.csv").is_file()
    before = _digests(ehr)
    prepare_demo(size="small", n_patients=300, artifacts=root, out=root / "ds")  # cached: nothing rewritten
    assert _digests(ehr) == before
    assert not [p for p in ehr.iterdir() if p.name.startswith(".")]  # no temporary folder left


def test_prepare_omop_makes_the_mimic_dataset(demo, tmp_path):
    root, ehr = demo
    (prog,) = (root / "programs").glob("demo_icd10cm_small/*")
    splits = SplitOptions(rood_codes=2)
    (a,) = prepare(mimic=ehr, program=prog, out=tmp_path, splits=splits)
    (b,) = prepare(omop=ehr / "omop", program=prog, out=tmp_path, splits=splits)
    assert a.manifest["counts"]["patients"]["kept"] > 200
    for name in ("patients", "code_counts", "rood_codes", "unknown_codes"):
        read = [pq.read_table(d.path / f"{name}.parquet") for d in (a, b)]
        assert read[1].equals(read[0]), name


def test_a_snomed_token_dataset_pretrains_and_finetunes(demo, tmp_path):
    _, ehr = demo
    program = compile_source(ehr / "athena", out=tmp_path / "programs", tokens="snomed").path
    vocabularies = set(pq.read_table(program / "concepts.parquet")["vocabulary"].to_pylist())
    assert vocabularies == {"SNOMEDCT", "SPECIAL"}
    (ds,) = prepare(
        omop=ehr / "omop",
        omop_codes="standard",
        program=program,
        out=tmp_path / "ds",
        splits=SplitOptions(rood_codes=0, finetune_train=60, finetune_val=20, test=20),
    )
    codes = ds.manifest["counts"]["codes"]
    assert codes["snomed_code_rows"] == codes["snomed_code_rows_mapped"] > 1000
    assert codes["unknown_code_rows"] == 0
    runs = tmp_path / "runs"
    common = ["--program", str(program), "--batch-size", "8", "--device", "cpu", "-q"]
    res = CliRunner().invoke(
        main,
        ["pretrain", str(ds.path), "--out", str(runs), "--model", "tiny", "--mode", "base",
         "--max-steps", "3", "--run-id", "pre", *common],
    )  # fmt: skip
    assert res.exit_code == 0, res.output
    res = CliRunner().invoke(
        main,
        ["finetune", str(runs / "pre"), "--dataset", str(ds.path), "--task", "mortality", "--out", str(runs),
         "--max-steps", "3", "--run-id", "fine", *common],
    )  # fmt: skip
    assert res.exit_code == 0, res.output
    assert "trial 0   test:" in res.output and "auroc" in res.output
