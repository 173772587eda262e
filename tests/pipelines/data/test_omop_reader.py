"""The OMOP CDM v5.4 reader against a hand-built CDM in the real layouts (omop_fixtures): the four forms
of a CDM read alike, source and standard codes, visits and their order, conditions without a visit,
mortality, every data-quality finding, the errors on broken input, and ``prepare --omop``."""

from __future__ import annotations

import copy
import json
import shutil

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner
from ehr_fixtures import mini_program
from omop_fixtures import (
    CONCEPTS,
    _d,
    _ts,
    concept_rows,
    condition,
    default_tables,
    visit,
    write_athena,
    write_cdm,
    write_csv,
)

import pipelines
from ontology_compiler.api import OMOP_CONCEPT_COLUMNS
from pipelines.cli import main
from pipelines.data.readers import READERS
from pipelines.data.readers.omop import read_omop
from pipelines.data.readers.omop_layout import CDM_COLUMNS
from pipelines.errors import InputFileError, MissingTableError, PipelineError


def _rows(r):
    return [
        (e["subject_id"], e["visit_index"], e["seq"], e["vocabulary"], e["code"])
        for e in r.events.to_pylist()
    ]


def _counts(r):
    return {k: v for k, v in r.counts.items() if k != "examples"}


def _tables(**changes):
    """The default tables with ``changes`` (table -> rows appended, or a function of the rows)."""
    t = copy.deepcopy(default_tables())
    for name, change in changes.items():
        t[name] = change(t[name]) if callable(change) else t[name] + change
    return t


SOURCE_EVENTS = [
    (1, 0, 0, "ICD9CM", "4019"), (1, 0, 1, "ICD9CM", "25000"),
    (1, 1, 0, "ICD10CM", "I10"), (1, 1, 1, "ICD10CM", "E119"),  # the primary I10 first
    (2, 0, 0, "ICD10CM", "J45909"),  # ZZZ99 is no ICD code
    (3, 0, 0, "ICD10CM", "N1830"),  # one source record mapped to two concepts: one code
    (5, 0, 0, "ICD10CM", "K219"), (5, 0, 1, "ICD9CM", "4019"),  # 2115-02-01 without a visit
    (5, 1, 0, "ICD10CM", "J45909"),  # visit 501, later that day
    (5, 2, 0, "ICD10CM", "I10"),  # names visit 999, which does not exist: its day, 2115-03-01
]  # fmt: skip


def test_the_layout_is_the_v54_ddl():
    assert CDM_COLUMNS["concept"] == OMOP_CONCEPT_COLUMNS  # the Athena header is the CDM's concept table
    assert len(CDM_COLUMNS["condition_occurrence"]) == 16 and len(CDM_COLUMNS["visit_occurrence"]) == 17
    assert CDM_COLUMNS["death"][:3] == ("person_id", "death_date", "death_datetime")


def test_csv_gz_parquet_duckdb_and_athena_read_alike(tmp_path):
    ref = read_omop(write_cdm(tmp_path / "csv"))
    assert _rows(ref) == SOURCE_EVENTS
    upper = {t: t.upper() for t in default_tables()}
    others = {
        "csv.gz": read_omop(write_cdm(tmp_path / "gz", "csv.gz")),
        "parquet": read_omop(write_cdm(tmp_path / "pq", "parquet")),
        "duckdb": read_omop(write_cdm(tmp_path / "db", "duckdb")),
        "upper-case names": read_omop(write_cdm(tmp_path / "up", names=upper)),
        "athena": read_omop(
            write_cdm(tmp_path / "nc", concept=False), vocabulary=write_athena(tmp_path / "v")
        ),
    }
    for name, r in others.items():
        assert r.events.equals(ref.events), name
        assert r.visits.equals(ref.visits) and r.labels.equals(ref.labels), name
        assert _counts(r) == _counts(ref), name
    db = others["duckdb"]
    assert db.source["path"].endswith("cdm.duckdb") and [i["path"] for i in db.source["inputs"]] == [
        "cdm.duckdb"
    ]
    assert db.counts["examples"]["source_values_not_icd"] == [
        "cdm.duckdb main.condition_occurrence row 6: condition_source_value 'ZZZ99'"
    ]
    assert (
        others["parquet"]
        .counts["examples"]["source_values_not_icd"][0]
        .startswith("condition_occurrence.parquet file_row_number 5")
    )
    ath = others["athena"].source
    assert ath["inputs"][-1]["path"] == "<outside>/CONCEPT.csv" and ath["omop"]["concept_table"].endswith(
        "CONCEPT.csv"
    )


def test_source_codes_and_their_counts(tmp_path):
    r = read_omop(write_cdm(tmp_path))
    c = r.counts
    assert c["rows_from_source_value"] == 3  # source concept 0 or empty: ZZZ99, K21.9, 4019
    assert c["source_values_read_by_code_shape"] == 0  # K21.9 and 4019 are codes of the concept table
    assert c["rows_of_a_source_mapped_to_another_concept"] == 1  # N18.30's second Maps to row
    assert c["source_values_not_icd"] == 1
    assert c["examples"]["source_values_not_icd"] == [
        "condition_occurrence.csv line 7: condition_source_value 'ZZZ99'"
    ]
    assert c["patients_in_source"] == 5 and c["patients_with_codes"] == 4 and c["dropped_no_diagnoses"] == 1
    assert r.source["omop"] == {"codes": "source", "database_schema": None, "concept_table": "cdm"}


def test_standard_codes_are_snomed_concepts(tmp_path):
    r = read_omop(write_cdm(tmp_path), codes="standard")
    assert _rows(r) == [
        (1, 0, 0, "SNOMED", "9990112009"), (1, 0, 1, "SNOMED", "9990104001"),
        (1, 1, 0, "SNOMED", "9990112009"), (1, 1, 1, "SNOMED", "9990104001"),
        (2, 0, 0, "SNOMED", "9990108003"),
        (3, 0, 0, "SNOMED", "990041000124103"), (3, 0, 1, "SNOMED", "9990106004"),  # both targets
        (5, 0, 0, "SNOMED", "9990112009"),  # the K21.9 row has no standard concept
        (5, 1, 0, "SNOMED", "9990108003"), (5, 2, 0, "SNOMED", "9990112009"),
    ]  # fmt: skip
    assert r.counts["rows_unmapped"] == 2 and r.counts["examples"]["rows_unmapped"] == [
        "condition_occurrence.csv line 7: condition_concept_id 0",
        "condition_occurrence.csv line 10: condition_concept_id 0",
    ]
    assert r.labels["chapters"].to_pylist() == [[], [], [], []]  # SNOMED codes get chapters in prepare
    with pytest.raises(ValueError, match="source, standard"):
        read_omop(tmp_path, codes="icd")


def test_visits_order_times_and_conditions_without_a_visit(tmp_path):
    r = read_omop(write_cdm(tmp_path))
    ev = r.events.to_pylist()
    p1 = [(e["visit_index"], str(e["visit_time"]), str(e["known_time"])) for e in ev if e["subject_id"] == 1]
    assert p1[0] == (0, "2114-05-01 08:00:00", "2114-05-03 12:00:00")  # visit 101, written second
    assert p1[2] == (1, "2116-01-01 10:00:00", "2116-01-01 20:00:00")
    p5 = sorted(
        {(e["visit_index"], str(e["visit_time"]), str(e["known_time"])) for e in ev if e["subject_id"] == 5}
    )
    assert p5 == [
        (0, "2115-02-01 00:00:00", "2115-02-01 23:59:59"),  # the day's rows without a visit: known by its end
        (1, "2115-02-01 10:00:00", "2115-02-02 10:00:00"),
        (2, "2115-03-01 00:00:00", "2115-03-01 23:59:59"),
    ]
    c = r.counts
    assert c["condition_rows_without_visit"] == 2 and c["visits_from_condition_dates"] == 2
    assert c["condition_rows_visit_not_found"] == 1
    assert c["examples"]["condition_rows_visit_not_found"] == [
        "condition_occurrence.csv line 13: condition_occurrence_id 54: visit_occurrence_id 999 is no "
        "visit of person_id 5"
    ]


def test_a_visit_of_dates_only_and_a_tie_on_the_start(tmp_path):
    """A visit without datetimes starts at midnight and is known at the end of its end date; two visits
    starting together are ordered by visit_occurrence_id."""
    extra = [
        visit(601, 6, "2117-01-01 00:00:00", "2117-01-03 00:00:00", visit_start_datetime=None,
              visit_end_datetime=None),
        visit(603, 6, "2118-01-01 09:00:00", "2118-01-02 09:00:00"),
        visit(602, 6, "2118-01-01 09:00:00", "2118-01-05 09:00:00"),
    ]  # fmt: skip
    cond = [
        condition(61, 6, 601, "2117-01-01", 1002, "I10"),
        condition(62, 6, 603, "2118-01-01", 1001, "E11.9"),
        condition(63, 6, 602, "2118-01-01", 1003, "J45.909"),
    ]
    r = read_omop(write_cdm(tmp_path, tables=_tables(visit_occurrence=extra, condition_occurrence=cond)))
    ev = [e for e in r.events.to_pylist() if e["subject_id"] == 6]
    assert [(e["visit_index"], e["code"]) for e in ev] == [(0, "I10"), (1, "J45909"), (2, "E119")]
    assert (str(ev[0]["visit_time"]), str(ev[0]["known_time"])) == (
        "2117-01-01 00:00:00",
        "2117-01-03 23:59:59",
    )
    assert (
        r.counts["condition_rows_of_unknown_persons"] == 3 and r.counts["patients_not_in_person_table"] == 1
    )


def test_mortality_is_mimics_182_day_rule(tmp_path):
    r = read_omop(write_cdm(tmp_path))
    labels = {x["subject_id"]: x["mortality_6m"] for x in r.labels.to_pylist()}
    assert labels == {1: True, 2: True, 3: False, 5: False}  # 99 days, in the visit, 200 days, alive
    # person 5's visits end 2115-02-01 (the day without a visit), 2115-02-02 and 2115-03-01 (its last)
    for day, expected in (("2115-08-30", True), ("2115-08-31", False)):  # 182 and 183 days after 03-01
        t = _tables(death=[{"person_id": 5, "death_date": _d(day)}])
        r = read_omop(write_cdm(tmp_path / day, tables=t))
        assert {x["subject_id"]: x["mortality_6m"] for x in r.labels.to_pylist()}[5] is expected, day
    vm = {(v["subject_id"], v["visit_index"]): v["mortality_6m"] for v in r.visits.to_pylist()}
    assert vm[(5, 0)] is False and vm[(5, 2)] is False  # 2115-08-31: more than 182 days after every visit


def test_death_findings(tmp_path):
    """Two death rows: the earliest day counts (a death_datetime earlier than death_date too); a death
    before the last visit ends still counts."""
    deaths = [
        {"person_id": 3, "death_date": _d("2113-06-01"), "death_datetime": _ts("2112-09-01 10:00:00")},
        {"person_id": 5, "death_date": _d("2115-02-15")},  # before the 2115-03-01 visit... of a date
        {"person_id": 9, "death_date": _d("2115-02-15")},
    ]
    t = _tables(death=lambda rows: rows + deaths)
    r = read_omop(write_cdm(tmp_path, tables=t))
    labels = {x["subject_id"]: x["mortality_6m"] for x in r.labels.to_pylist()}
    assert labels[3] is True  # 2112-09-01 is 59 days after the visit (death_date 2113-01-20 too late)
    assert labels[5] is True
    c = r.counts
    assert c["persons_with_several_death_rows"] == 1
    assert c["examples"]["persons_with_several_death_rows"] == ["death.csv line 5: person_id 3 again"]
    assert c["deaths_of_unknown_persons"] == 1 and c["examples"]["deaths_of_unknown_persons"] == [
        "death.csv line 7: person_id 9"
    ]
    assert c["death_before_last_visit_end"] == 0  # person 5's last real visit (501) ends 2115-02-02
    early = _tables(death=lambda rows: [{"person_id": 1, "death_date": _d("2115-01-01")}])
    r = read_omop(write_cdm(tmp_path / "early", tables=early))
    assert r.counts["death_before_last_visit_end"] == 1
    assert r.counts["examples"]["death_before_last_visit_end"][0].startswith(
        "death.csv line 2: person_id 1, death_date 2115-01-01 before the end 2116-01-01 20:00:00"
    )
    assert {x["subject_id"]: x["mortality_6m"] for x in r.labels.to_pylist()}[1] is True


def test_persons_visits_and_observation_periods_findings(tmp_path):
    t = _tables(
        visit_occurrence=[
            visit(901, 9, "2115-01-01 00:00:00", "2115-01-02 00:00:00"),  # no person 9
            visit(401, 4, "2111-07-04 00:00:00", "2111-07-01 00:00:00"),  # ends before it starts
        ],
        condition_occurrence=[
            condition(91, 9, 901, "2115-01-01", 1002, "I10"),
            condition(41, 4, 401, "2111-07-04", 1002, "I10"),
        ],
        observation_period=lambda rows: [r for r in rows if r["person_id"] != 4],
    )
    r = read_omop(write_cdm(tmp_path, tables=t))
    c, ex = r.counts, r.counts["examples"]
    assert c["visits_of_unknown_persons"] == 1 and ex["visits_of_unknown_persons"] == [
        "visit_occurrence.csv line 7: person_id 9"
    ]
    assert c["condition_rows_of_unknown_persons"] == 1 and c["patients_not_in_person_table"] == 1
    assert c["visits_ending_before_start"] == 1 and ex["visits_ending_before_start"] == [
        "visit_occurrence.csv line 8: visit_occurrence_id 401 ends 2111-07-01 00:00:00, before its start "
        "2111-07-04 00:00:00"
    ]
    p4 = [e for e in r.events.to_pylist() if e["subject_id"] == 4]
    assert p4[0]["known_time"] == p4[0]["visit_time"]  # its start taken as its end
    assert c["condition_rows_outside_observation_period"] == 2  # person 4 has none; person 9 neither
    assert ex["condition_rows_outside_observation_period"][0].startswith("condition_occurrence.csv line 14:")


def test_duplicates_and_concept_findings(tmp_path):
    dup_visit = visit(201, 2, "2120-03-01 00:00:00", "2120-03-05 00:00:00")
    t = _tables(
        visit_occurrence=[dup_visit],  # an exact duplicate of 201
        condition_occurrence=[
            condition(21, 2, 201, "2120-03-01", 1003, "J45909", 3003, primary=True),  # exact duplicate
            condition(71, 3, 301, "2112-07-01", 3007, "8000/3", 3007),  # source and standard: ICDO3
            condition(72, 3, 301, "2112-07-01", 8888, "I10", 8888),  # ids the concept table lacks
            condition(73, 3, 301, "2112-07-01", 0, "V10", 3006),  # a category in both lists; not standard
            condition(74, 3, 301, "2112-07-01", 0, "J18.9", 3010),  # by shape; a malformed SCTID
            condition(75, 3, 301, "2112-07-01", 0, "V58.89"),  # both shapes, a code of ICD-9-CM only
        ],
        concept=lambda rows: rows
        + concept_rows([(1002, "ICD10CM", "I10", "", "Condition", "x", "again"),
                        (3010, "SNOMED", "12AB", "S", "Condition", "Disorder", "bad")]),
    )  # fmt: skip
    path = write_cdm(tmp_path, tables=t)
    r = read_omop(path)
    c, ex = r.counts, r.counts["examples"]
    assert c["duplicate_visit_occurrence_rows"] == 1 and c["duplicate_condition_occurrence_rows"] == 1
    assert ex["duplicate_condition_occurrence_rows"] == ["condition_occurrence.csv line 14 repeats line 6"]
    assert c["concept_ids_listed_twice"] == 1 and ex["concept_ids_listed_twice"] == [
        f"concept.csv line {len(CONCEPTS) + 2}: concept_id 1002 again"
    ]
    assert c["source_concepts_not_icd"] == 1 and ex["source_concepts_not_icd"] == [
        "condition_occurrence.csv line 15: condition_source_concept_id 3007 is ICDO3 8000/3"
    ]
    assert c["source_concepts_not_in_concept_table"] == 1  # read from its value instead: I10
    assert c["source_values_ambiguous"] == 1 and ex["source_values_ambiguous"] == [
        "condition_occurrence.csv line 17: condition_source_value 'V10'"
    ]
    assert c["source_values_read_by_code_shape"] == 1  # J18.9 (the value I10 is a code of the concept table)
    assert c["source_values_read_by_icd_code_lists"] == 1  # V58.89
    p3 = [(e["vocabulary"], e["code"]) for e in r.events.to_pylist() if e["subject_id"] == 3]
    assert p3 == [("ICD10CM", "N1830"), ("ICD10CM", "I10"), ("ICD10CM", "J189"), ("ICD9CM", "V5889")]
    s = read_omop(path, codes="standard")
    c, ex = s.counts, s.counts["examples"]
    assert c["condition_concepts_not_snomed"] == 1 and ex["condition_concepts_not_snomed"] == [
        "condition_occurrence.csv line 15: condition_concept_id 3007 is ICDO3 8000/3"
    ]
    assert c["condition_concepts_not_in_concept_table"] == 1
    assert c["snomed_codes_malformed"] == 1 and c["condition_concepts_not_standard"] == 1
    assert [e["code"] for e in s.events.to_pylist() if e["subject_id"] == 3] == [
        "990041000124103", "9990106004", "9990105000"  # the concept that is not standard is kept
    ]  # fmt: skip


def test_a_dotted_value_keeps_the_vocabulary_its_dot_gives(tmp_path):
    """The concept table holds the ICD-9-CM E872.1 only: the value ``E87.21`` (an ICD-10-CM code, dot
    after three characters) is not read as it, ``E872.1`` is, and dotless ``E8721`` is the table's."""
    t = _tables(
        condition_occurrence=[
            condition(81, 3, 301, "2112-07-01", 0, "E87.21"),
            condition(82, 3, 301, "2112-07-01", 0, "E872.1"),
            condition(83, 3, 301, "2112-07-01", 0, "E8721"),
        ],
        concept=lambda rows: (
            rows
            + concept_rows([(2004, "ICD9CM", "E872.1", "", "Condition", "4-dig billing E code", "Sterile")])
        ),
    )
    r = read_omop(write_cdm(tmp_path, tables=t))
    p3 = [(e["vocabulary"], e["code"]) for e in r.events.to_pylist() if e["subject_id"] == 3]
    assert p3 == [("ICD10CM", "N1830"), ("ICD10CM", "E8721"), ("ICD9CM", "E8721"), ("ICD9CM", "E8721")]
    assert r.counts["source_values_read_by_code_shape"] == 1 and r.counts["source_values_ambiguous"] == 0


def test_conflicting_rows_of_one_id_are_an_error(tmp_path):
    t = _tables(visit_occurrence=[visit(201, 2, "2120-03-02 00:00:00", "2120-03-05 00:00:00")])
    with pytest.raises(InputFileError, match=r"visit_occurrence_id 201 on 2 different rows") as e:
        read_omop(write_cdm(tmp_path, tables=t))
    assert e.value.line == 7 and e.value.path.name == "visit_occurrence.csv"


def test_unparseable_dates_name_file_and_line(tmp_path):
    root = write_cdm(tmp_path / "csv")
    f = root / "visit_occurrence.csv"
    f.write_text(f.read_text().replace("2120-03-01,2120-03-01 00:00:00", "2120-02-30,2120-03-01 00:00:00"))
    with pytest.raises(InputFileError, match="malformed date in column visit_start_date") as e:
        read_omop(root)
    assert e.value.path == f and e.value.line == 4 and "'2120-02-30'" in str(e.value)
    # a Parquet column of text: the row is named
    pqf = write_cdm(tmp_path / "pq", "parquet") / "death.parquet"
    t = pq.read_table(pqf)
    t = t.set_column(1, "death_date", pa.array(["2116-04-10", "2120-13-05", "2113-01-20"]))
    pq.write_table(t, pqf)
    with pytest.raises(InputFileError, match="malformed date in column death_date at file_row_number 1"):
        read_omop(tmp_path / "pq")


def test_bad_values_and_empty_required_values(tmp_path):
    root = write_cdm(tmp_path)
    f = root / "condition_occurrence.csv"
    text = f.read_text()
    f.write_text(text.replace("\n13,1,", "\nthirteen,1,", 1))
    with pytest.raises(InputFileError, match="malformed value in column condition_occurrence_id") as e:
        read_omop(root)
    assert e.value.line == 4 and e.value.expected == "an integer"
    f.write_text(text.replace("\n13,1,", "\n13,,", 1))
    with pytest.raises(InputFileError, match="empty person_id") as e:
        read_omop(root)
    assert e.value.line == 4


def test_missing_tables_and_columns_name_what_is_expected(tmp_path):
    root = write_cdm(tmp_path / "a")
    (root / "death.csv").unlink()
    (root / "observation_period.csv").unlink()
    with pytest.raises(MissingTableError, match="not found: observation_period, death") as e:
        read_omop(root)
    assert e.value.path == root
    assert "person, observation_period, visit_occurrence, condition_occurrence, death" in str(e.value)
    no_concept = write_cdm(tmp_path / "b", concept=False)
    with pytest.raises(MissingTableError, match="no concept table.*--omop-vocabulary"):
        read_omop(no_concept)
    cols = tuple(c for c in CDM_COLUMNS["condition_occurrence"] if c != "condition_source_concept_id")
    root = write_cdm(tmp_path / "c", columns={"condition_occurrence": cols})
    with pytest.raises(InputFileError, match="missing column.s. condition_source_concept_id") as e:
        read_omop(root)
    assert e.value.path.name == "condition_occurrence.csv" and e.value.line == 1
    assert "condition_occurrence_id, person_id, condition_concept_id" in e.value.expected
    db = write_cdm(tmp_path / "d", "duckdb", columns={"death": ("person_id", "death_date")})
    with pytest.raises(InputFileError, match="table main.death: missing column.s. death_datetime"):
        read_omop(db)


def test_database_schemas_and_other_refusals(tmp_path):
    db = write_cdm(tmp_path / "db", "duckdb")
    with pytest.raises(MissingTableError, match="in schema cdm"):
        read_omop(db, schema="cdm")
    import duckdb

    moved = tmp_path / "moved.duckdb"
    shutil.copy(db, moved)
    con = duckdb.connect(str(moved))
    con.execute("CREATE SCHEMA cdm")
    for t in default_tables():
        con.execute(f'CREATE TABLE cdm."{t}" AS SELECT * FROM main."{t}"')
        con.execute(f'DROP TABLE main."{t}"')
    con.close()
    with pytest.raises(MissingTableError, match="schema.s. holding them: cdm"):
        read_omop(moved)
    assert _rows(read_omop(moved, schema="cdm")) == SOURCE_EVENTS
    with pytest.raises(InputFileError, match="--omop-schema names a schema of a DuckDB database"):
        read_omop(write_cdm(tmp_path / "f"), schema="main")
    (tmp_path / "x.csv").write_text("person_id\n1\n")
    with pytest.raises(InputFileError, match="not a DuckDB database"):
        read_omop(tmp_path / "x.csv")
    twice = write_cdm(tmp_path / "t")
    shutil.copy(twice / "person.csv", twice / "PERSON.parquet")
    with pytest.raises(InputFileError, match="table person is given 2 times"):
        read_omop(twice)
    bad = tmp_path / "voc"
    write_csv(bad / "CONCEPT.csv", CDM_COLUMNS["concept"], concept_rows())  # commas: not Athena's layout
    with pytest.raises(InputFileError, match="not an Athena CONCEPT.csv header"):
        read_omop(write_cdm(tmp_path / "n", concept=False), vocabulary=bad)


# --------------------------------------------------------------------------------------- the registry


@pytest.fixture(scope="module")
def program(tmp_path_factory):
    return mini_program(tmp_path_factory.mktemp("programs"))


def test_registered_with_its_options():
    r = READERS["omop"]
    assert r.option == "--omop" and r.file_ok and pipelines.read_omop is read_omop
    assert [r.option_flag(o) for o in r.options] == ["--omop-codes", "--omop-schema", "--omop-vocabulary"]
    assert r.source_options({"codes": "standard"}) == {
        "codes": "standard",
        "schema": None,
        "vocabulary": None,
    }
    assert r.id_options(r.source_options()) == {"codes": "source", "schema": None}
    with pytest.raises(ValueError, match="--omop-codes must be one of source, standard"):
        r.source_options({"codes": "icd"})


def test_cli_prepare_omop_source_and_standard(program, tmp_path):
    db = write_cdm(tmp_path / "cdm", "duckdb")
    out = {}
    for codes in ("source", "standard"):
        args = ["prepare", "--omop", str(db), "--omop-codes", codes, "--program", str(program)]
        res = CliRunner().invoke(main, [*args, "--out", str(tmp_path / codes), "--rood-codes", "0"])
        assert res.exit_code == 0, res.output
        assert "warning   condition_rows_visit_not_found 1" in res.output
        (path,) = (tmp_path / codes).glob("omop-cdm.duckdb/*")
        out[codes] = (path, json.loads((path / "manifest.json").read_text()))
    (ps, ms), (pstd, mstd) = out["source"], out["standard"]
    assert ms["options"]["reader"] == {"codes": "source", "schema": None}
    assert mstd["options"]["reader"] == {"codes": "standard", "schema": None}
    assert ms["dataset_id"] != mstd["dataset_id"] and ms["source"]["reader"] == "omop"
    # standard codes: each SNOMED concept becomes the program's ICD token carrying it (as MEDS's do)
    assert (
        mstd["counts"]["codes"]["snomed_code_rows"]
        == mstd["counts"]["codes"]["snomed_code_rows_mapped"]
        == 10
    )
    patients = pq.read_table(pstd / "patients.parquet").to_pydict()
    assert patients["subject_id"] == [1, 2, 3, 5] and patients["mortality_6m"] == [True, True, False, False]
    assert pq.read_table(ps / "patients.parquet")["mortality_6m"].to_pylist() == patients["mortality_6m"]


def test_options_without_omop_are_refused(program, tmp_path):
    from pipelines.data.prepare import prepare

    with pytest.raises(PipelineError, match="--omop-codes given without --omop"):
        prepare(program=program, mimic=tmp_path, omop_codes="standard")
    res = CliRunner().invoke(main, ["prepare", "--demo", "--omop-codes", "standard"])
    assert res.exit_code == 1 and "(and --omop-codes)" in res.output


def test_hostile_names_stay_names(tmp_path):
    """Paths reach DuckDB as bound parameters (glob characters escaped), header cells only as quoted
    column names; a header cell the reader does not use never reaches the SQL."""
    evil = tmp_path / "O'Brien [2] *?"
    cols = (*CDM_COLUMNS["person"], 'x"); DROP TABLE omop_person; --')
    ref = _rows(read_omop(write_cdm(tmp_path / "plain")))
    for fmt in ("csv", "parquet", "duckdb"):
        path = write_cdm(tmp_path / fmt, fmt, columns={"person": cols})
        (evil / fmt).parent.mkdir(exist_ok=True)
        shutil.move(tmp_path / fmt, evil / fmt)  # DuckDB cannot write a database under a "?"; it reads one
        assert _rows(read_omop(evil / fmt / path.relative_to(tmp_path / fmt))) == ref, fmt


def test_a_database_view_is_read_like_a_table(tmp_path):
    import duckdb

    db = write_cdm(tmp_path, "duckdb")
    con = duckdb.connect(str(db))
    con.execute("ALTER TABLE death RENAME TO death_base")
    con.execute('CREATE VIEW "DEATH" AS SELECT * FROM death_base')
    con.close()
    assert _rows(read_omop(db)) == SOURCE_EVENTS
    assert {x["subject_id"]: x["mortality_6m"] for x in read_omop(db).labels.to_pylist()}[1] is True
