"""Units of compile validation: calendar dates, repeated rows, package selection, summary warnings.
(The end-to-end cases, each on a damaged copy of the fixture release, are
tests/adversarial/test_compile_*.py.)"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from ontology_compiler import DuplicateRowError, PackageError
from ontology_compiler.rf2_files import RF2File, select_files
from ontology_compiler.rf2_schema import is_calendar_date
from ontology_compiler.snapshot import drop_duplicates, latest_per_id
from ontology_compiler.summary import release_warnings


@pytest.mark.parametrize(
    ("value", "ok"),
    [
        ("20220531", True),
        (20200229, True),
        ("20210229", False),
        ("20201341", False),
        ("20200100", False),
        ("00000101", False),
        ("2020013", False),
        ("2020O131", False),
    ],
)
def test_is_calendar_date(value, ok):
    assert is_calendar_date(value) is ok


def _table(ids, times, active, src=None, lines=None) -> pa.Table:
    n = len(ids)
    return pa.table(
        {
            "id": pa.array(ids),
            "effectiveTime": pa.array(times, pa.int32()),
            "active": pa.array(active, pa.int8()),
            "_line": pa.array(lines if lines is not None else np.arange(n) + 2, pa.int64()),
            "_src": pa.array(src if src is not None else [0] * n, pa.int32()),
        }
    )


FILES = [Path("a.txt"), Path("b.txt")]


def test_unique_rows_are_untouched():
    t = _table([1, 2, 1], [20200131, 20200131, 20220131], [1, 1, 0])
    out, n = drop_duplicates(t, FILES)
    assert n == 0 and out.equals(t)


def test_identical_repeats_keep_the_first():
    t = _table([5, 1, 5, 5], [20200131] * 4, [1, 1, 1, 1], src=[0, 0, 1, 1], lines=[2, 3, 2, 3])
    out, n = drop_duplicates(t, FILES)
    assert n == 2
    assert out["id"].to_pylist() == [5, 1] and out["_src"].to_pylist() == [0, 0]


@pytest.mark.parametrize("ids", [[7, 7], ["6b2c-uuid", "6b2c-uuid"]])
def test_differing_repeat_names_both_lines(ids):
    t = _table(ids, [20200131, 20200131], [0, 1], src=[0, 1], lines=[9, 4])
    with pytest.raises(DuplicateRowError) as e:
        drop_duplicates(t, FILES)
    err = e.value
    assert (err.path, err.line, err.other_path, err.other_line) == (Path("a.txt"), 9, Path("b.txt"), 4)
    assert "active=0" in str(err) and "active=1" in str(err)


def test_latest_per_id_after_dropping():
    t = _table([3, 3, 3], [20200131, 20220131, 20220131], [1, 0, 0])
    out, n = drop_duplicates(t, FILES)
    assert n == 1
    assert latest_per_id(out, None)["active"].to_pylist() == [0]
    assert latest_per_id(out, 20210101)["active"].to_pylist() == [1]


def _f(path: str, content: str, ns: str, date: str, release: str = "Snapshot") -> RF2File:
    return RF2File(Path(path), content, release, ns, date, None, None)


def _package(ns: str, date: str, tmp: Path) -> list[RF2File]:
    out = []
    for kind in ("Concept", "Description", "Relationship", "Language", "ExtendedMap"):
        p = tmp / f"{ns}_{date}" / f"{kind}.txt"
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text("header\r\nrow\r\n")
        out.append(_f(str(p), kind, ns, date))
    return out


def test_packages_of_one_namespace_need_a_choice(tmp_path):
    files = _package("INT", "20220531", tmp_path) + _package("INT", "20210131", tmp_path)
    with pytest.raises(PackageError, match="2 packages of namespace INT"):
        select_files(files, "Snapshot")
    chosen = select_files(files, "Snapshot", packages=("INT_20210131",))
    assert {f.date for fs in chosen.values() for f in fs} == {"20210131"}


def test_packages_of_other_namespaces_are_kept(tmp_path):
    files = _package("INT", "20220531", tmp_path) + _package("US1000124", "20220301", tmp_path)
    chosen = select_files(files, "Snapshot", packages=("INT_20220531",))
    assert {f.package for fs in chosen.values() for f in fs} == {"INT_20220531", "US1000124_20220301"}


def test_release_warnings_lists_only_counts_that_are_not_zero():
    assert (
        release_warnings({"relationships_dropped_unknown_concept": 0, "rows_duplicate_dropped_Concept": 0})
        == []
    )
    lines = release_warnings(
        {
            "descriptions_dropped_unknown_concept": 2,
            "relationships_dropped_characteristic_type": 1,
            "relationships_dropped_unknown_type": 3,
            "rows_duplicate_dropped_Relationship": 4,
            "rows_duplicate_dropped_Concept": 1,
        }
    )
    assert lines == [
        "warnings  2 descriptions of a concept not in the release (dropped)",
        "warnings  3 relationships whose type is not a concept of the release (dropped)",
        "warnings  1 relationship rows of another characteristic type (dropped)",
        "warnings  5 identical repeated rows (Concept 1, Relationship 4) (dropped)",
    ]
