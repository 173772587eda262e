"""``hrrbert doctor2vec generate`` finds the demographics through the dataset's manifest, never the working
directory: the same command from two folders gives the same id and bytes; a changed demographics file
gives a new id (or, when the dataset lists the file's hash, an error); a missing one is an error, not
other data under the same name."""

from __future__ import annotations

import gzip
import json
import logging
import os
import shutil

import pytest
from d2v_fixtures import OPTS, make_dataset
from train_fixtures import program_dir  # noqa: F401

from ontology_compiler.artifact import sha256_file
from pipelines.doctor2vec.data import D2VOptions, generate_doctor2vec
from pipelines.doctor2vec.read import D2VDataError


def files_of(path):
    return {p.name: sha256_file(p) for p in sorted(path.iterdir())}


@pytest.fixture
def project(tmp_path, program_dir):  # noqa: F811
    """A dataset prepared from the project folder with a relative source path, as `hrrbert prepare
    --mimic artifacts/ehr/...` run there records it."""
    root = tmp_path / "project"
    rel = "artifacts/datasets/mimic-x/d1/ehr"
    ds = make_dataset(root / "artifacts" / "datasets" / "mimic-x" / "d1", program_dir, source_path=rel)
    assert json.loads((ds / "manifest.json").read_text())["source"]["path"] == rel
    return root, ds


def test_same_id_and_bytes_from_any_working_directory(project, program_dir, tmp_path, monkeypatch, caplog):  # noqa: F811
    root, ds = project
    other = tmp_path / "elsewhere"
    other.mkdir()
    results = []
    for i, cwd in enumerate((root, other, ds)):
        monkeypatch.chdir(cwd)
        with caplog.at_level(logging.WARNING):
            r = generate_doctor2vec(
                os.path.relpath(ds, cwd), program_dir, out=tmp_path / f"out{i}", options=OPTS
            )
        results.append(r)
        assert r.manifest["demographics"] == "mimic-iv", cwd
        assert "age and sex unknown" not in caplog.text
    ids = {r.path.name for r in results}
    assert len(ids) == 1
    assert files_of(results[0].path) == files_of(results[1].path) == files_of(results[2].path)
    assert {r.path.parent.name for r in results} == {"d2v-mimic-x"}  # the default name from the dataset, too
    inputs = results[0].manifest["inputs"]
    assert inputs == [
        {
            "role": "demographics",
            "reader": "mimic-iv",
            "path": "hosp/patients.csv.gz",
            "sha256": sha256_file(ds / "ehr" / "hosp" / "patients.csv.gz"),
        }
    ]


def _rewrite_ages(f, age):
    with gzip.open(f, "rt") as fh:
        lines = fh.read().splitlines()
    out = [lines[0]] + [",".join([*ln.split(",")[:2], str(age), *ln.split(",")[3:]]) for ln in lines[1:]]
    with gzip.open(f, "wt") as fh:
        fh.write("\n".join(out) + "\n")


def test_a_changed_demographics_file_the_dataset_lists_is_refused(project, program_dir, tmp_path):  # noqa: F811
    _, ds = project
    _rewrite_ages(ds / "ehr" / "hosp" / "patients.csv.gz", 30)
    with pytest.raises(D2VDataError, match="changed since the dataset was prepared"):
        generate_doctor2vec(ds, program_dir, out=tmp_path / "out", options=OPTS)
    assert not (tmp_path / "out").exists()


def test_a_changed_unlisted_demographics_file_gives_a_new_id(program_dir, tmp_path):  # noqa: F811
    ds = make_dataset(tmp_path / "ds", program_dir)
    m = json.loads((ds / "manifest.json").read_text())
    del m["source"]["inputs"]  # a hand-made dataset that does not list its files
    (ds / "manifest.json").write_text(json.dumps(m))
    a = generate_doctor2vec(ds, program_dir, out=tmp_path / "out", options=OPTS)
    _rewrite_ages(ds / "ehr" / "hosp" / "patients.csv.gz", 30)
    b = generate_doctor2vec(ds, program_dir, out=tmp_path / "out", options=OPTS)
    assert b.written and a.path != b.path and a.path.exists()
    assert a.manifest["inputs"][0]["sha256"] != b.manifest["inputs"][0]["sha256"]


def test_missing_demographics_is_an_error_and_no_demographics_another_id(project, program_dir, tmp_path):  # noqa: F811
    _, ds = project
    shutil.rmtree(ds / "ehr")
    with pytest.raises(D2VDataError, match="(?s)demographics .* were not found.*--no-demographics"):
        generate_doctor2vec(ds, program_dir, out=tmp_path / "out", options=OPTS)
    assert not (tmp_path / "out").exists()
    r = generate_doctor2vec(
        ds, program_dir, out=tmp_path / "out", options=D2VOptions(**{**vars(OPTS), "demographics": False})
    )
    assert r.manifest["demographics"] == "none" and r.manifest["inputs"] == []
