"""Unit tests of the compiler's pure pieces: SCTIDs, words, ICD codes, map resolution, snapshots."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from ontology_compiler import icd
from ontology_compiler import rf2_schema as S
from ontology_compiler.errors import DuplicateRowError
from ontology_compiler.map_policy import load_policy
from ontology_compiler.mapping import MappingStats, choose, extended_map_candidates
from ontology_compiler.sctid import is_valid, make_sctid, verhoeff_valid
from ontology_compiler.snapshot import latest_per_id
from ontology_compiler.words import explode_words, load_stopwords, semantic_tag, strip_semantic_tag


def test_sctid_examples_from_the_spec():
    assert make_sctid(9990001) == 9990001007
    assert make_sctid(1215890, "01") == 1215890014
    assert make_sctid(123, "10", "1000124") == 1231000124102
    assert is_valid(138875005) and not is_valid(138875004)


def test_vectorised_verhoeff_matches_scalar():
    rng = np.random.default_rng(0)
    ids = np.concatenate(
        [
            rng.integers(100_000, 10**18, size=3000, dtype=np.int64),
            np.array([make_sctid(int(i)) for i in rng.integers(1, 10**9, size=500)], dtype=np.int64),
            np.array([S.ROOT, S.US_ENGLISH, S.ICD10CM_MAP_REFSET, 12, 99999], dtype=np.int64),
            # every length 6-18 with every digit count in the top group of three, and the edges
            np.array([make_sctid(int(i)) for i in (10 ** np.arange(3, 16)).tolist()], dtype=np.int64),
            np.array([100_000, 10**17, 10**18 - 1, 0, -138875005], dtype=np.int64),
        ]
    )
    assert verhoeff_valid(ids).tolist() == [x >= 0 and is_valid(int(x)) for x in ids]


@pytest.mark.parametrize("collide", [False, True])
def test_full_resolution_by_string_ids(monkeypatch, collide):
    """Refset rows of a Full file: the latest row per member id, identical repeats dropped, also when
    the ids' digests collide (then the strings are sorted instead)."""
    from ontology_compiler import snapshot

    if collide:
        monkeypatch.setattr(snapshot, "_digest", lambda arr: np.zeros(len(arr), dtype=np.uint64))
    ids = ["b" * 36, "a" * 36, "b" * 36, "c" * 36, "a" * 36, "a" * 36]
    t = pa.table(
        {
            "id": ids,
            "effectiveTime": pa.array(
                [20200131, 20200131, 20210131, 20200131, 20220131, 20220131], pa.int32()
            ),
            "active": pa.array([1, 1, 0, 1, 0, 0], pa.int8()),
            "_src": pa.array([0] * 6, pa.int32()),
            "_line": pa.array(range(2, 8), pa.int64()),
        }
    )
    kept, dropped = snapshot.drop_duplicates(t, [])
    assert dropped == 1 and kept["_line"].to_pylist() == [2, 3, 4, 5, 6]
    latest = snapshot.latest_per_id(kept, None)
    pairs = zip(latest["id"].to_pylist(), latest["effectiveTime"].to_pylist(), strict=True)
    assert sorted(pairs) == [
        ("a" * 36, 20220131), ("b" * 36, 20210131), ("c" * 36, 20200131)
    ]  # fmt: skip
    assert sorted(snapshot.latest_per_id(kept, 20201231)["_line"].to_pylist()) == [2, 3, 5]
    for at in (None, 20201231, 20210131, 20190101):  # the one-sort resolution gives the same rows
        once, n_dropped = snapshot.resolve_at(t, [], at)
        assert n_dropped == 1 and once.equals(snapshot.latest_per_id(kept, at))
    differ = t.set_column(2, "active", pa.array([1, 1, 0, 1, 0, 1], pa.int8()))
    with pytest.raises(DuplicateRowError, match="differ"):
        snapshot.resolve_at(differ, [Path("f.txt")], None)


def test_all_distinct_ids(monkeypatch):
    import uuid

    from ontology_compiler import snapshot

    u = [str(uuid.UUID(int=int(i))) for i in np.random.default_rng(1).integers(0, 2**62, size=500)]
    assert snapshot.all_distinct(pa.array(u)) and not snapshot.all_distinct(pa.array(u + [u[7]]))
    assert snapshot.all_distinct(pa.array(u).slice(3))  # a slice keeps its own offsets
    assert snapshot.all_distinct(pa.array(u + [u[7].upper()]))  # compared as text
    assert not snapshot.all_distinct(pa.array(["a1", "b2", "a1"]))  # any one width
    assert snapshot.all_distinct(pa.array(["a", "bb", "a "])) and not snapshot.all_distinct(
        pa.array(["a", "bb", "a"])
    )
    assert not snapshot.all_distinct(pa.chunked_array([pa.array([5, 6]), pa.array([7, 5])]))
    # digests that collide are settled on the strings themselves
    monkeypatch.setattr(snapshot, "_digest", lambda arr: np.zeros(len(arr), dtype=np.uint64))
    assert snapshot.all_distinct(pa.array(u)) and not snapshot.all_distinct(pa.array(u + [u[0]]))


def test_words_rule():
    terms = pa.array(
        ["Ménière's disease (disorder)", "Type 2 diabetes-mellitus, with  the coma", "Sjögren’s syndrome"]
    )
    assert strip_semantic_tag(terms).to_pylist()[0] == "Ménière's disease"
    assert semantic_tag(terms).to_pylist() == ["disorder", None, None]
    w = explode_words(pa.array([0, 1, 2]), strip_semantic_tag(terms), load_stopwords())
    assert w["word"].to_pylist() == [
        "ménières",
        "disease",
        "type",
        "2",
        "diabetes",
        "mellitus",
        "coma",
        "sjögrens",
        "syndrome",
    ]
    assert w["owner"].to_pylist() == [0, 0, 1, 1, 1, 1, 1, 2, 2]


def test_shipped_stopwords_documented_and_lowercase(tmp_path):
    words = load_stopwords()
    assert {"the", "of", "with", "nos"} <= set(words) and "not" not in words
    assert all(w == w.lower() for w in words)
    custom = tmp_path / "stop.txt"
    custom.write_text("# mine\nDisease\n", encoding="utf-8")
    assert load_stopwords(custom) == ["disease"]


def test_icd_dots_and_chapters():
    assert icd.dotted(pa.array(["E119", "I10", "E1165"]), icd.ICD10CM).to_pylist() == [
        "E11.9",
        "I10",
        "E11.65",
    ]
    assert icd.dotted(pa.array(["25000", "E8798", "V5861", "0389"]), icd.ICD9CM).to_pylist() == [
        "250.00",
        "E879.8",
        "V58.61",
        "038.9",
    ]
    assert icd.dotless(pa.array([" e11.9 ", "250.00"])).to_pylist() == ["E119", "25000"]
    assert icd.chapters(pa.array(["E119", "I10", "O9A1", "S7200", "U071"]), icd.ICD10CM).to_pylist() == [
        4,
        9,
        15,
        19,
        22,
    ]
    assert icd.chapters(pa.array(["25000", "E8798", "V5861", "0389"]), icd.ICD9CM).to_pylist() == [
        3,
        19,
        18,
        1,
    ]


@pytest.mark.parametrize("vocabulary", [icd.ICD9CM, icd.ICD10CM])
def test_scalar_icd_forms_follow_the_columnar_rule(vocabulary):
    codes = ["E119", "I10", "E1165", "25000", "E8798", "E879", "V5861", "0389", " e11.9 ", "250.00", "E1", ""]
    assert [icd.dotted_code(c, vocabulary) for c in codes] == icd.dotted(
        pa.array(codes), vocabulary
    ).to_pylist()
    assert [icd.dotless_code(c) for c in codes] == icd.dotless(pa.array(codes)).to_pylist()
    assert (
        icd.dotted_code("E8798", icd.ICD9CM) == "E879.8" and icd.dotted_code("E8798", icd.ICD10CM) == "E87.98"
    )
    with pytest.raises(ValueError, match="unknown vocabulary"):
        icd.dotted_code("E119", "ICD10")


def _maprows(rows):
    cols = ["referencedComponentId", "mapGroup", "mapPriority", "mapRule", "mapTarget"]
    d = {c: [r[i] for r in rows] for i, c in enumerate(cols)}
    n = len(rows)
    return pa.table(
        {
            "id": [f"u{i}" for i in range(n)],
            "effectiveTime": pa.array([20220131] * n, pa.int32()),
            "active": pa.array([1] * n, pa.int8()),
            "moduleId": pa.array([S.ICD10_MAP_MODULE] * n, pa.int64()),
            "refsetId": pa.array([S.ICD10_MAP_REFSET] * n, pa.int64()),
            "referencedComponentId": pa.array(d["referencedComponentId"], pa.int64()),
            "mapGroup": pa.array(d["mapGroup"], pa.int32()),
            "mapPriority": pa.array(d["mapPriority"], pa.int32()),
            "mapRule": d["mapRule"],
            "mapAdvice": [""] * n,
            "mapTarget": d["mapTarget"],
            "correlationId": pa.array([S.MAP_CORRELATION_NOT_SPECIFIED] * n, pa.int64()),
            "mapCategoryId": pa.array([S.MAP_CATEGORY_PROPERLY_CLASSIFIED] * n, pa.int64()),
        }
    )


def test_static_map_resolution():
    a, b, c = make_sctid(9990001), make_sctid(9990002), make_sctid(9990003)
    rows = _maprows(
        [
            (a, 1, 2, "OTHERWISE TRUE", "J45.9"),  # out of order on purpose
            (a, 1, 1, "IFA 248152002 &#x7C; Female (finding) &#x7C;", "O99.5"),
            (a, 1, 3, "TRUE", "X99.9"),  # after the winner: never fires
            (a, 2, 1, "TRUE", ""),  # empty target: dropped
            (b, 1, 1, "TRUE", "E11.9"),
            (c, 1, 1, "TRUE", "E11.9"),  # E11.9 -> two concepts
        ]
    )
    stats = MappingStats()
    cand = choose(extended_map_candidates(rows, stats), load_policy())
    got = sorted(
        zip(
            cand["code"].to_pylist(),
            cand["sctid"].to_pylist(),
            cand["kind"].to_pylist(),
            cand["chosen"].to_pylist(),
            strict=True,
        )
    )
    assert got == [
        ("E119", b, "unconditional", True),
        ("E119", c, "unconditional", True),
        ("J459", a, "unconditional", True),
        ("O995", a, "conditional", True),  # reached only through an IFA rule: kept, flagged
    ]
    assert cand.filter(pa.compute.equal(cand["code"], "O995"))["map_rule"].to_pylist() == [
        "IFA 248152002 | Female (finding) |"
    ]
    assert stats.counts["map_rows_unreachable_after_true"] == 1
    assert stats.counts["map_groups_without_target"] == 1


def test_precedence_prefers_unconditional_then_source():
    a, b = make_sctid(9990001), make_sctid(9990002)
    rows = _maprows(
        [
            (a, 1, 1, "IFA 248152002 | Female (finding) |", "N94.9"),
            (a, 1, 2, "OTHERWISE TRUE", "R10.2"),
            (b, 1, 1, "TRUE", "N94.9"),
        ]
    )
    cand = choose(extended_map_candidates(rows, MappingStats()), load_policy())
    chosen = cand.filter(cand["chosen"])
    pairs = sorted(zip(chosen["code"].to_pylist(), chosen["sctid"].to_pylist(), strict=True))
    assert pairs == [("N949", b), ("R102", a)]  # the IFA candidate of N94.9 loses to b's TRUE row
    assert "higher-precedence" in cand.filter(pa.compute.invert(cand["chosen"]))["reason"][0].as_py()


def test_latest_per_id_full_resolution():
    t = pa.table(
        {
            "id": pa.array([5, 5, 5, 7, 7], pa.int64()),
            "effectiveTime": pa.array([20200131, 20220131, 20210131, 20200131, 20230131], pa.int32()),
            "active": pa.array([1, 0, 1, 1, 0], pa.int8()),
        }
    )

    def at(d):
        return sorted(
            zip(*latest_per_id(t, d).select(["id", "effectiveTime"]).to_pydict().values(), strict=True)
        )

    assert at(None) == [(5, 20220131), (7, 20230131)]
    assert at(20211231) == [(5, 20210131), (7, 20200131)]
    assert at(20200131) == [(5, 20200131), (7, 20200131)]
    assert latest_per_id(t, 20190101).num_rows == 0


@pytest.mark.parametrize("kind", ["Concept", "Description", "Relationship", "Language", "ExtendedMap"])
def test_file_name_grammar(kind):
    from ontology_compiler.rf2_schema import FILE_NAME_RE

    names = {
        "Concept": "sct2_Concept_Full_US1000124_20220301.txt",
        "Description": "sct2_Description_Snapshot-en_INT_20220531.txt",
        "Relationship": "sct2_Relationship_Snapshot_INT_20220531.txt",
        "Language": "der2_cRefset_LanguageSnapshot-en_INT_20220531.txt",
        "ExtendedMap": "der2_iisssccRefset_ExtendedMapSnapshot_INT_20220531.txt",
    }
    assert FILE_NAME_RE.match(names[kind])["content"] == kind
