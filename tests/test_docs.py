"""The format pages list exactly what the writers write.

``docs/program-format.md`` and ``docs/dataset-format.md`` document every Parquet file in a table whose
header row is ``| column | type | meaning |`` under a heading naming the file, and the manifest's
top-level keys in a ``| key | type | meaning |`` table under the ``manifest.json`` heading. This test
parses those tables and compares them with artifacts written here through the public APIs: a program
compiled from the RF2 fixture, one compiled from the OWL fixture, and a dataset prepared from a small
MIMIC-IV-layout cohort written below. Adding, dropping, renaming or retyping a column (or a file, or a
manifest key) in a writer fails this test until the page says so.
"""

from __future__ import annotations

import csv
import gzip
import json
import re
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
DATA = ROOT / "tests" / "data"
PROGRAM_PAGE = DOCS / "program-format.md"
DATASET_PAGE = DOCS / "dataset-format.md"
PAGES = (
    "architecture.md",
    "program-format.md",
    "dataset-format.md",
    "input-formats.md",
    "demo.md",
    "diff-format.md",
    "kernel.md",
)

COLUMN_HEADER = ("column", "type", "meaning")
KEY_HEADER = ("key", "type", "meaning")
FILE_IN_HEADING = re.compile(r"`([\w./-]+\.(?:parquet|json))`")
# manifest keys only one program front end writes, marked so in the meaning cell
ONLY = {"RF2 only": "owl", "OWL only": "rf2"}


# ------------------------------------------------------------------------------------------ parsing


def _cells(line: str) -> list[str]:
    return [c.strip() for c in line.strip().strip("|").split("|")]


def _unquote(cell: str) -> str:
    return cell.strip().strip("`").strip()


def parse_page(path: Path) -> tuple[dict[str, dict[str, str]], dict[str, str]]:
    """``({file: {column: type}}, {manifest key: meaning})`` from the page's tables.

    A table belongs to the file named (in backticks) by the nearest heading above it.
    """
    files: dict[str, dict[str, str]] = {}
    keys: dict[str, str] = {}
    current: str | None = None
    lines = path.read_text(encoding="utf-8").splitlines()
    i = 0
    while i < len(lines):
        line = lines[i]
        if line.startswith("#"):
            m = FILE_IN_HEADING.search(line)
            current = m.group(1) if m else None
        elif line.startswith("|") and tuple(c.lower() for c in _cells(line)) in (COLUMN_HEADER, KEY_HEADER):
            kind = tuple(c.lower() for c in _cells(line))
            assert current is not None, f"{path.name}, line {i + 1}: a format table under no file heading"
            assert re.fullmatch(r"\|?\s*:?-+:?\s*(\|\s*:?-+:?\s*)+\|?", lines[i + 1].strip()), (
                f"{path.name}, line {i + 2}: expected the table's separator row"
            )
            rows: dict[str, str] = {}
            i += 2
            while i < len(lines) and lines[i].startswith("|"):
                cells = _cells(lines[i])
                assert len(cells) == 3 and cells[0].startswith("`"), (
                    f"{path.name}, line {i + 1}: a row needs 3 cells, the name in backticks: {lines[i]!r}"
                )
                name = _unquote(cells[0])
                assert name not in rows, f"{path.name}, line {i + 1}: {name} listed twice"
                rows[name] = _unquote(cells[1]) if kind == COLUMN_HEADER else cells[2]
                i += 1
            if kind == COLUMN_HEADER:
                assert current not in files, f"{path.name}: two column tables for {current}"
                files[current] = rows
            else:
                assert current == "manifest.json", f"{path.name}: a key table under {current}"
                keys = rows
            continue
        i += 1
    return files, keys


def type_name(t: pa.DataType) -> str:
    """The spelling the pages use: ``int32``, ``string``, ``list<int64>``, ``dictionary<int8, string>``."""
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        return f"list<{type_name(t.value_type)}>"
    if pa.types.is_dictionary(t):
        return f"dictionary<{type_name(t.index_type)}, {type_name(t.value_type)}>"
    if pa.types.is_large_string(t):
        return "string"
    return str(t)


def written(folder: Path) -> tuple[dict[str, dict[str, str]], list[str]]:
    """``({file: {column: type}}, manifest top-level keys)`` of an artifact folder."""
    manifest = json.loads((folder / "manifest.json").read_text(encoding="utf-8"))
    listed = sorted(f["path"] for f in manifest["files"])
    on_disk = sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*.parquet"))
    assert listed == on_disk, f"{folder}: manifest lists {listed}, folder holds {on_disk}"
    schemas = {}
    for rel in listed:
        schema = pq.read_schema(folder / rel)
        schemas[rel] = {f.name: type_name(f.type) for f in schema}
    return schemas, list(manifest)


def compare(page: Path, doc: dict[str, dict[str, str]], got: dict[str, dict[str, str]]) -> list[str]:
    """Differences between documented and written columns, as readable lines (empty when they agree)."""
    out = []
    for name in sorted(set(doc) | set(got)):
        if name not in got:
            out.append(f"{page.name} documents {name}, which no writer wrote")
            continue
        if name not in doc:
            out.append(f"{name} is written but {page.name} has no column table for it")
            continue
        d, g = doc[name], got[name]
        if set(d) != set(g):
            missing = [c for c in g if c not in d]
            extra = [c for c in d if c not in g]
            out.append(
                f"{name}: written columns {list(g)}; {page.name} lists {list(d)}"
                + (f" (undocumented: {missing})" if missing else "")
                + (f" (not written: {extra})" if extra else "")
            )
        for col in d:
            if col in g and d[col] != g[col]:
                out.append(f"{name}.{col}: written as {g[col]}, {page.name} says {d[col]}")
    return out


# ------------------------------------------------------------------------------------------ artifacts


@pytest.fixture(scope="module")
def programs(tmp_path_factory) -> dict[str, Path]:
    """An RF2 program (the SNOMED fixture) and an OWL program (the OWL fixture), via the public API."""
    from ontology_compiler import compile_ontology, compile_owl

    out = tmp_path_factory.mktemp("programs")
    rf2 = compile_ontology(DATA / "snomed_mini_20220531", out=out).path
    owl = compile_owl(DATA / "owl_mini.owl", codes=DATA / "owl_mini_codes.txt", out=out).path
    return {"rf2": rf2, "owl": owl}


MIMIC_HEADERS = {
    "patients": "subject_id,gender,anchor_age,anchor_year,anchor_year_group,dod",
    "admissions": "subject_id,hadm_id,admittime,dischtime,deathtime,admission_type,admit_provider_id,"
    "admission_location,discharge_location,insurance,language,marital_status,race,edregtime,edouttime,"
    "hospital_expire_flag",
    "diagnoses_icd": "subject_id,hadm_id,seq_num,icd_code,icd_version",
}
# codes of the RF2 fixture program (ICD-10-CM, dotless as MIMIC-IV writes them)
KNOWN = ("E119", "I10", "J459", "K37", "N1830", "M819", "A491", "D509", "E1165", "J029", "K509", "N289")
RARE = ("S729", "M350", "H810")  # each given to two or three patients, so the ROOD hold-out has candidates


def write_mimic(root: Path, n: int = 80) -> Path:
    """A small cohort in the MIMIC-IV ``hosp`` layout: 1-3 admissions per patient, known, rare and
    unknown codes, a few deaths."""
    tail = ["EW EMER.", "P1", "EMERGENCY ROOM", "HOME", "Medicare", "ENGLISH", "MARRIED", "WHITE", "", ""]
    patients, admissions, diagnoses = [], [], []
    for s in range(1, n + 1):
        patients.append([s, "FM"[s % 2], 60, 2110, "2008 - 2010", "2113-02-01" if s % 9 == 0 else ""])
        for v in range(1 + s % 3):
            hadm = s * 10 + v
            death = "2112-01-02 10:00:00" if s % 13 == 0 and v == s % 3 else ""
            admissions.append(
                [s, hadm, f"211{v}-01-01 10:00:00", f"211{v}-01-02 10:00:00", death, *tail, int(bool(death))]
            )
            for k in range(2):
                diagnoses.append([s, hadm, k + 1, KNOWN[(s + v + 5 * k) % len(KNOWN)], 10])
        if s <= 3 * len(RARE) - 1:
            diagnoses.append([s, s * 10, 3, RARE[s % len(RARE)], 10])
        if s % 7 == 0:
            diagnoses.append([s, s * 10, 4, "ZZZ99", 10])  # not in the program
    hosp = root / "hosp"
    hosp.mkdir(parents=True)
    for name, rows in (("patients", patients), ("admissions", admissions), ("diagnoses_icd", diagnoses)):
        with gzip.open(hosp / f"{name}.csv.gz", "wt", newline="", encoding="utf-8") as f:
            w = csv.writer(f, lineterminator="\n")
            w.writerow(MIMIC_HEADERS[name].split(","))
            w.writerows(rows)
    return root


@pytest.fixture(scope="module")
def dataset(programs, tmp_path_factory) -> Path:
    """A tokenized dataset of the small cohort against the RF2 program, via ``pipelines.prepare``."""
    from pipelines import prepare as _prepare

    # the public name is the function; a same-named submodule may shadow it on the package
    prepare = getattr(_prepare, "prepare", _prepare)
    root = tmp_path_factory.mktemp("dataset")
    (result,) = prepare(mimic=write_mimic(root / "mimic"), program=programs["rf2"], out=root / "datasets")
    return Path(result.path)


# ---------------------------------------------------------------------------------------------- tests


def test_pages_exist_and_link_only_inside_the_repository():
    """Every relative link of a page resolves to a file of this repository (a clone has nothing else)."""
    for name in PAGES:
        text = (DOCS / name).read_text(encoding="utf-8")
        for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", text):
            if "://" in target:
                continue
            path = (DOCS / target).resolve()
            assert path.is_relative_to(ROOT) and path.exists(), f"docs/{name} links to {target}"
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    for name in PAGES:
        assert f"(docs/{name})" in readme, f"README.md does not link docs/{name}"


def test_program_page_lists_exactly_the_written_columns(programs):
    doc, _keys = parse_page(PROGRAM_PAGE)
    got: dict[str, dict[str, str]] = {}
    for path in programs.values():
        schemas, _ = written(path)
        for name, cols in schemas.items():
            assert got.setdefault(name, cols) == cols, f"{name} differs between the RF2 and OWL programs"
    assert {"graph/snomed_concrete_values.parquet", "graph/owl_classes.parquet"} <= set(got)
    problems = compare(PROGRAM_PAGE, doc, got)
    assert not problems, "\n".join(problems)


def test_program_page_lists_exactly_the_manifest_keys(programs):
    _doc, keys = parse_page(PROGRAM_PAGE)
    for front_end, path in programs.items():
        _, got = written(path)
        expected = [
            k for k, meaning in keys.items() if not any(m in meaning and ONLY[m] == front_end for m in ONLY)
        ]
        assert sorted(got) == sorted(expected), (
            f"{front_end} manifest keys {got}; {PROGRAM_PAGE.name} documents {expected} for {front_end}"
        )


def test_dataset_page_lists_exactly_the_written_columns_and_keys(dataset):
    doc, keys = parse_page(DATASET_PAGE)
    got, manifest_keys = written(dataset)
    assert pq.read_table(dataset / "rood_codes.parquet").num_rows > 0  # the cohort exercises every file
    assert pq.read_table(dataset / "unknown_codes.parquet").num_rows > 0
    problems = compare(DATASET_PAGE, doc, got)
    assert not problems, "\n".join(problems)
    assert sorted(manifest_keys) == sorted(keys), (
        f"dataset manifest keys {manifest_keys}; {DATASET_PAGE.name} documents {list(keys)}"
    )


def test_parquet_metadata_as_documented(programs, dataset):
    for path in programs.values():
        pid = json.loads((path / "manifest.json").read_text(encoding="utf-8"))["program_id"]
        for f in path.rglob("*.parquet"):
            meta = pq.read_schema(f).metadata
            assert meta[b"program_id"].decode() == pid and meta[b"format_version"] == b"1", f
    m = json.loads((dataset / "manifest.json").read_text(encoding="utf-8"))
    for f in dataset.glob("*.parquet"):
        meta = pq.read_schema(f).metadata
        assert meta[b"dataset_id"].decode() == m["dataset_id"], f
        assert meta[b"program_id"].decode() == m["program_id"] and meta[b"format_version"] == b"1", f


def test_parser_sees_a_dropped_or_added_column(tmp_path):
    """The comparison itself: a column missing from, or extra in, a page is reported."""
    page = tmp_path / "p.md"
    page.write_text(
        "# x\n\n### `a.parquet`\n\n| column | type | meaning |\n|---|---|---|\n"
        "| `x` | `int32` | one |\n| `y` | `string` | two |\n",
        encoding="utf-8",
    )
    doc, _ = parse_page(page)
    assert doc == {"a.parquet": {"x": "int32", "y": "string"}}
    assert compare(page, doc, {"a.parquet": {"x": "int32", "y": "string"}}) == []
    assert compare(page, doc, {"a.parquet": {"x": "int32"}})
    assert compare(page, doc, {"a.parquet": {"x": "int32", "y": "string", "z": "bool"}})
    assert compare(page, doc, {"a.parquet": {"x": "int64", "y": "string"}})
    assert compare(page, doc, {"a.parquet": {"x": "int32", "y": "string"}, "b.parquet": {"z": "bool"}})
