"""The reader registry (``pipelines.data.readers.READERS``) and ``prepare``'s options (``PrepareConfig``):
every declaration has each of its parts, everything keyed by a reader's name reads the registry (the CLI's
source options, ``prepare``, ``export-meds``, the baselines' ceiling, Doctor2Vec's demographics, the public
API), a reader registered from a test is prepared end to end, and each default of ``prepare`` lives once."""

from __future__ import annotations

import dataclasses
import inspect
import sys
import types

import pytest
from click.testing import CliRunner
from ehr_fixtures import mini_program, write_eicu, write_mimic

import pipelines
from pipelines.cli import main
from pipelines.cli.data import EXPORTABLE
from pipelines.data.config import UNKNOWN_CODES, PrepareConfig
from pipelines.data.readers import HOSPITALS, PARTS, READERS, Reader, get_reader
from pipelines.data.readers.common import input_record
from pipelines.data.splits import SplitOptions
from pipelines.errors import PipelineError

OPTIONAL_PARTS = {"demographics", "meds_export"}  # a reader may lack these (None)


def _params(path: tuple[str, ...]) -> list:
    cmd = main
    for name in path:
        cmd = cmd.commands[name]
    return cmd.params


@pytest.fixture(scope="module")
def program(tmp_path_factory):
    return mini_program(tmp_path_factory.mktemp("programs"))


@pytest.mark.parametrize("name", list(READERS))
def test_every_reader_declares_each_part(name):
    r = READERS[name]
    assert r.name == name and get_reader(name) is r
    assert r.option.startswith("--") and r.param.isidentifier() and r.help.endswith(".")
    assert r.hospital is None or isinstance(r.hospital, str)
    for part in PARTS:
        if getattr(r, part) is None:
            assert part in OPTIONAL_PARTS, f"{name}: {part} is required"
            continue
        value = r.part(part)
        if part == "demographics":
            file, sql = value
            assert isinstance(file, str) and "{csv}" in sql, name
            continue
        assert callable(value), f"{name}.{part}"
        params = inspect.signature(value).parameters
        if part in ("read", "meds_export"):
            assert "threads" in params and params["threads"].kind is inspect.Parameter.KEYWORD_ONLY
    if r.meds_export is None:
        assert r.note, f"{name}: say why it cannot be exported (note)"


def test_options_params_and_read_names_are_unique():
    for attr in ("option", "param", "read"):
        values = [getattr(r, attr) for r in READERS.values()]
        assert len(set(values)) == len(values), attr


def test_cli_source_options_equal_the_registry():
    prepare = _params(("prepare",))[: len(READERS)]
    assert [(p.opts, p.name, p.help) for p in prepare] == [
        ([r.option], r.param, r.help) for r in READERS.values()
    ]
    assert EXPORTABLE == tuple(r for r in READERS.values() if r.meds_export is not None)
    export = [p for p in _params(("export-meds",)) if p.name in {r.param for r in READERS.values()}]
    assert [p.opts for p in export] == [[r.option] for r in EXPORTABLE]
    assert all(p.help.startswith(r.help.removesuffix(".")) for p, r in zip(export, EXPORTABLE, strict=True))


def test_everything_keyed_by_a_reader_name_reads_the_registry():
    from pipelines.data.export_meds import KINDS
    from pipelines.doctor2vec.read import DEMOGRAPHICS
    from pipelines.eval import baselines

    assert HOSPITALS == {"mimic-iv": "mimic-iv", "eicu": "eicu"}  # meds: no ground truth
    assert baselines.HOSPITALS is HOSPITALS and not hasattr(baselines, "HOSPITAL_OF_READER")
    assert KINDS == tuple(r.name for r in EXPORTABLE)
    assert DEMOGRAPHICS == {r.name: r.part("demographics") for r in READERS.values() if r.demographics}
    for r in READERS.values():  # the public API: pipelines.read_mimic, ...
        assert r.read in pipelines.__all__ and getattr(pipelines, r.read) is r.part("read")


def test_input_paths_are_recorded_relative_to_the_outer_folder(tmp_path):
    """The dataset id hashes these records: MIMIC-IV given hosp/ records hosp/...; eICU given the folder
    holding eicu/ records eicu/... (as before the registry)."""
    mimic = write_mimic(tmp_path / "m")
    root, files = READERS["mimic-iv"].inputs(mimic / "hosp")
    assert root == mimic
    assert [input_record(root, f)["path"] for f in files] == [
        "hosp/patients.csv.gz",
        "hosp/admissions.csv.gz",
        "hosp/diagnoses_icd.csv.gz",
    ]
    write_eicu(tmp_path / "e" / "eicu")
    root, files = READERS["eicu"].inputs(tmp_path / "e")
    assert root == tmp_path / "e"
    assert [input_record(root, f)["path"] for f in files] == ["eicu/patient.csv.gz", "eicu/diagnosis.csv.gz"]
    assert READERS["eicu"].inputs(tmp_path / "e" / "eicu")[0] == tmp_path / "e" / "eicu"


def test_a_registered_reader_is_prepared_end_to_end(monkeypatch, program, tmp_path):
    """A new reader is a module plus its declaration: here a module registered from the test."""
    from pipelines.data.export_meds import export_meds
    from pipelines.data.prepare import prepare
    from pipelines.data.readers import mimic

    module = types.ModuleType("pipelines.data.readers.fake")
    module.read_fake, module.fake_files, module.fake_root = (
        mimic.read_mimic,
        mimic.mimic_files,
        mimic.mimic_root,
    )
    monkeypatch.setitem(sys.modules, module.__name__, module)
    fake = Reader(
        "fake",
        "--fake",
        "A fake source.",
        "fake",
        read="read_fake",
        input_files="fake_files",
        root="fake_root",
        hospital=None,
    )
    monkeypatch.setitem(READERS, "fake", fake)
    ehr = write_mimic(tmp_path / "ehr")
    (r,) = prepare(fake=ehr, program=program, out=tmp_path / "ds", splits=SplitOptions(rood_codes=0))
    assert r.manifest["source"]["reader"] == "fake" and r.path.parent.name == "fake-ehr"
    (m,) = prepare(mimic=ehr, program=program, out=tmp_path / "ds", splits=SplitOptions(rood_codes=0))
    assert m.manifest["source"]["inputs"] == r.manifest["source"]["inputs"]  # the same files read
    with pytest.raises(PipelineError, match="cannot be exported"):
        export_meds("fake", ehr, tmp_path / "meds")


def test_prepare_defaults_live_once_in_the_config():
    from pipelines.data.prepare import prepare, prepare_source
    from pipelines.data.tokenize import tokenize

    fields = {f.name: f for f in dataclasses.fields(PrepareConfig)}
    params = {p.name: p for p in _params(("prepare",))}
    for name, f in fields.items():
        assert params[name].default == f.default, name
        assert f.metadata["help"], name
    assert list(params["unknown"].type.choices) == list(UNKNOWN_CODES)
    for fn in (prepare, prepare_source):  # they take the config (or its fields as keywords), restating none
        assert not set(inspect.signature(fn).parameters) & set(fields), fn.__name__
    tok = inspect.signature(tokenize).parameters
    assert {n: tok[n].default for n in ("max_len", "max_visits", "unknown")} == {
        n: fields[n].default for n in ("max_len", "max_visits", "unknown")
    }


def test_demo_excludes_the_sources_and_names_them(tmp_path):
    res = CliRunner().invoke(main, ["prepare", "--demo", "--mimic", str(tmp_path)])
    assert res.exit_code == 1
    assert "drop " + "/".join([r.option for r in READERS.values()] + ["--program"]) in res.output


def test_export_meds_demo_is_one_call_of_the_demo_room(monkeypatch, tmp_path):
    calls = []
    monkeypatch.setattr("pipelines.demo.prepare.export_demo_meds", lambda *a, **kw: calls.append((a, kw)))
    monkeypatch.setattr("pipelines.data.export_meds.describe", lambda r: "described")
    res = CliRunner().invoke(main, ["export-meds", str(tmp_path / "out"), "--demo", "--seed", "3", "-q"])
    assert res.exit_code == 0, res.output
    assert calls == [
        (
            (str(tmp_path / "out"),),
            {
                "artifacts": "artifacts",
                "size": "default",
                "n_patients": 30_000,
                "seed": 3,
                "name": None,
                "labels": True,
                "force": False,
            },
        )
    ]
