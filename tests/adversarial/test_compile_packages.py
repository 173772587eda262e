"""Packages of a release folder: a package without (or with empty) core files, several International
packages of different dates, dates in file names. Each bad release is built in tmp_path from the fixture.

Before: the International Concept file missing (or header-only) next to the US extension compiled to
11 tokens instead of 31 and reported 131 lost rows as "relationships of inactive concepts"; a second
International package of another date was merged silently.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner
from rf2_edit import INT, one

from ontology_compiler import InputFileError, MissingInputError, OptionError, PackageError, compile_ontology
from ontology_compiler.cli import main

US = "SnomedCT_MiniUSExtensionRF2_PRODUCTION_20220301T120000Z"


def _header_only(p: Path) -> None:
    p.write_bytes(p.read_bytes().split(b"\r\n")[0] + b"\r\n")


def _nothing_written(out: Path) -> bool:
    return not out.exists() or not any(out.rglob("manifest.json"))


@pytest.mark.parametrize(
    "kind", ["sct2_Concept_Snapshot_*", "sct2_Description_Snapshot*", "sct2_Relationship_Snapshot_*"]
)
def test_international_core_file_missing_names_the_package(release, tmp_path, kind):
    p = one(release / INT / "Snapshot", kind)
    p.unlink()
    with pytest.raises(MissingInputError) as e:
        compile_ontology(release, out=tmp_path / "out")
    msg = str(e.value)
    assert "package INT_20220531" in msg and str(p.parent.parent) in msg
    assert kind.split("_")[1] in msg  # Concept / Description / Relationship
    assert _nothing_written(tmp_path / "out")


def test_international_concept_header_only_is_fatal(release, tmp_path):
    p = one(release / INT / "Snapshot", "sct2_Concept_Snapshot_*")
    _header_only(p)
    with pytest.raises(InputFileError) as e:
        compile_ontology(release, out=tmp_path / "out")
    assert e.value.path == p
    assert "package INT_20220531" in str(e.value) and "only the header" in str(e.value)
    assert _nothing_written(tmp_path / "out")


def test_extension_relationship_empty_file_is_fatal(release, tmp_path):
    p = one(release / US / "Snapshot", "sct2_Relationship_Snapshot_*")
    p.write_bytes(b"")
    with pytest.raises(InputFileError) as e:
        compile_ontology(release, out=tmp_path / "out")
    assert e.value.path == p and "package US1000124_20220301" in str(e.value)
    assert "an empty file" in str(e.value)


def test_full_release_checks_packages_too(release, tmp_path):
    _header_only(one(release / INT / "Full", "sct2_Concept_Full_*"))
    with pytest.raises(InputFileError, match="INT_20220531"):
        compile_ontology(release, out=tmp_path / "out", as_of="20220131")


def test_cli_missing_concept_file_exits_1(release, tmp_path):
    one(release / INT / "Snapshot", "sct2_Concept_Snapshot_*").unlink()
    r = CliRunner().invoke(main, [str(release), "--out", str(tmp_path / "out"), "-q"])
    assert r.exit_code == 1, r.output
    assert "package INT_20220531" in r.output and "Traceback" not in r.output


def test_refset_only_package_is_allowed(release, tmp_path, baseline):
    """A package of refsets only (here: a copy of the US language refset under another namespace and
    date) needs no terminology files of its own."""
    src = one(release / US / "Snapshot", "der2_cRefset_LanguageSnapshot-en_*")
    pkg = release / "SnomedCT_LanguageOnly_PRODUCTION_20220401T120000Z" / "Snapshot" / "Refset" / "Language"
    pkg.mkdir(parents=True)
    header = src.read_bytes().split(b"\r\n")[0]
    (pkg / "der2_cRefset_LanguageSnapshot-en_999000_20220401.txt").write_bytes(header + b"\r\n")
    r = compile_ontology(release, out=tmp_path / "out")
    assert r.written and r.manifest["counts"]["concepts"] == baseline.manifest["counts"]["concepts"]


def _second_international(release: Path, date: str) -> Path:
    """A copy of the International package renamed to another file date, one term changed (an older
    release differs in content; the program id hashes content, not file names)."""
    dst = release / INT.replace("20220531", date)
    shutil.copytree(release / INT, dst)
    for p in list(dst.rglob("*_INT_20220531.txt")):
        p.rename(p.with_name(p.name.replace("20220531", date)))
    for p in dst.rglob("sct2_Description_*"):
        p.write_bytes(p.read_bytes().replace(b"High blood pressure disorder", b"High blood pressure"))
    return dst


def test_two_international_packages_are_an_error(release, tmp_path):
    other = _second_international(release, "20210131")
    with pytest.raises(PackageError) as e:
        compile_ontology(release, out=tmp_path / "out")
    msg = str(e.value)
    assert "INT_20210131" in msg and "INT_20220531" in msg and str(other / "Snapshot") in msg
    assert "--package" in msg
    assert _nothing_written(tmp_path / "out")


def test_named_package_is_read_alone(release, tmp_path, baseline):
    _second_international(release, "20210131")
    r = compile_ontology(release, out=tmp_path / "out", packages=("INT_20220531",))
    # exactly the fixture's files are read: the same inputs give the fixture's program id
    assert r.program_id == baseline.program_id
    assert not any("20210131" in i["path"] for i in r.manifest["inputs"])
    older = compile_ontology(release, out=tmp_path / "out", packages=("INT_20210131",))
    assert older.program_id != baseline.program_id and older.written


def test_cli_package_option(release, tmp_path, baseline):
    _second_international(release, "20210131")
    out = tmp_path / "out"
    r = CliRunner().invoke(main, [str(release), "--out", str(out), "-q"])
    assert r.exit_code == 1 and "2 packages of namespace INT" in r.output
    r = CliRunner().invoke(main, [str(release), "--out", str(out), "-q", "--package", "INT_20220531"])
    assert r.exit_code == 0, r.output
    assert r.output.strip().endswith(baseline.program_id)


@pytest.mark.parametrize(
    ("value", "error", "text"),
    [
        ("INT_20990101", PackageError, "packages found: INT_20220531"),
        ("INT-2022", OptionError, "NAMESPACE_YYYYMMDD"),
    ],
)
def test_package_option_must_name_a_package(release, tmp_path, value, error, text):
    with pytest.raises(error, match=text):
        compile_ontology(release, out=tmp_path / "out", packages=(value,))


def test_file_name_date_must_be_a_calendar_date(release, tmp_path):
    p = one(release / US / "Snapshot", "sct2_Concept_Snapshot_*")
    bad = p.with_name(p.name.replace("20220301", "20221341"))
    p.rename(bad)
    with pytest.raises(InputFileError) as e:
        compile_ontology(release, out=tmp_path / "out")
    assert e.value.path == bad and e.value.found == "20221341"
