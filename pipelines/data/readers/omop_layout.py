"""The OMOP CDM v5.4 tables the OMOP reader reads: their columns in the order of the official DDL, the
columns the reader uses (each with the kind of value it holds), the values every row must have, and the
few concept ids the reader and the demo's OMOP writer share (``docs/input-formats.md``, "OMOP CDM v5.4
event tables").

Light: plain tuples and dicts, no DuckDB.
"""

from __future__ import annotations

# the CDM tables read (the concept table may come from an Athena vocabulary folder instead)
EVENT_TABLES = ("person", "observation_period", "visit_occurrence", "condition_occurrence", "death")
CONCEPT = "concept"

# table -> its columns, in the order of the v5.4 DDL (OHDSI CommonDataModel, inst/ddl/5.4)
CDM_COLUMNS: dict[str, tuple[str, ...]] = {
    "person": (
        "person_id", "gender_concept_id", "year_of_birth", "month_of_birth", "day_of_birth",
        "birth_datetime", "race_concept_id", "ethnicity_concept_id", "location_id", "provider_id",
        "care_site_id", "person_source_value", "gender_source_value", "gender_source_concept_id",
        "race_source_value", "race_source_concept_id", "ethnicity_source_value",
        "ethnicity_source_concept_id",
    ),
    "observation_period": (
        "observation_period_id", "person_id", "observation_period_start_date",
        "observation_period_end_date", "period_type_concept_id",
    ),
    "visit_occurrence": (
        "visit_occurrence_id", "person_id", "visit_concept_id", "visit_start_date", "visit_start_datetime",
        "visit_end_date", "visit_end_datetime", "visit_type_concept_id", "provider_id", "care_site_id",
        "visit_source_value", "visit_source_concept_id", "admitted_from_concept_id",
        "admitted_from_source_value", "discharged_to_concept_id", "discharged_to_source_value",
        "preceding_visit_occurrence_id",
    ),
    "condition_occurrence": (
        "condition_occurrence_id", "person_id", "condition_concept_id", "condition_start_date",
        "condition_start_datetime", "condition_end_date", "condition_end_datetime",
        "condition_type_concept_id", "condition_status_concept_id", "stop_reason", "provider_id",
        "visit_occurrence_id", "visit_detail_id", "condition_source_value", "condition_source_concept_id",
        "condition_status_source_value",
    ),
    "death": (
        "person_id", "death_date", "death_datetime", "death_type_concept_id", "cause_concept_id",
        "cause_source_value", "cause_source_concept_id",
    ),
    "concept": (
        "concept_id", "concept_name", "domain_id", "vocabulary_id", "concept_class_id", "standard_concept",
        "concept_code", "valid_start_date", "valid_end_date", "invalid_reason",
    ),
}  # fmt: skip

# table -> the columns read, each with its kind: "id" (an integer), "date", "datetime" or "text"
READ: dict[str, dict[str, str]] = {
    "person": {"person_id": "id"},
    "observation_period": {
        "person_id": "id",
        "observation_period_start_date": "date",
        "observation_period_end_date": "date",
    },
    "visit_occurrence": {
        "visit_occurrence_id": "id",
        "person_id": "id",
        "visit_start_date": "date",
        "visit_start_datetime": "datetime",
        "visit_end_date": "date",
        "visit_end_datetime": "datetime",
    },
    "condition_occurrence": {
        "condition_occurrence_id": "id",
        "person_id": "id",
        "condition_concept_id": "id",
        "condition_start_date": "date",
        "condition_start_datetime": "datetime",
        "condition_status_concept_id": "id",
        "visit_occurrence_id": "id",
        "condition_source_value": "text",
        "condition_source_concept_id": "id",
    },
    "death": {"person_id": "id", "death_date": "date", "death_datetime": "datetime"},
    "concept": {
        "concept_id": "id",
        "vocabulary_id": "text",
        "concept_code": "text",
        "standard_concept": "text",
    },
}

# table -> the columns read that every row must fill (NOT NULL in the DDL, and needed here)
REQUIRED: dict[str, tuple[str, ...]] = {
    "person": ("person_id",),
    "observation_period": ("person_id", "observation_period_start_date", "observation_period_end_date"),
    "visit_occurrence": ("visit_occurrence_id", "person_id", "visit_start_date"),
    "condition_occurrence": ("condition_occurrence_id", "person_id", "condition_start_date"),
    "death": ("person_id", "death_date"),
    "concept": ("concept_id",),
}

# text forms of the dates and times of a CSV column (or a text column of a Parquet file or DuckDB table)
DATE_FORMATS = ("%Y-%m-%d", "%Y-%m-%d %H:%M:%S", "%Y-%m-%d %H:%M:%S.%f", "%Y-%m-%dT%H:%M:%S")
DATETIME_FORMATS = (
    "%Y-%m-%d %H:%M:%S",
    "%Y-%m-%d %H:%M:%S.%f",
    "%Y-%m-%dT%H:%M:%S",
    "%Y-%m-%dT%H:%M:%S.%f",
    "%Y-%m-%d",
)

# the Athena download's CONCEPT.csv: TAB-separated, unquoted, this header (dates YYYYMMDD, not read)
ATHENA_CONCEPT = "CONCEPT.csv"
ATHENA_RELATIONSHIP = "CONCEPT_RELATIONSHIP.csv"

# concept ids (OMOP standardized vocabularies)
PRIMARY_DIAGNOSIS = 32902  # Condition Status: Primary diagnosis (ordered first within its visit)
SECONDARY_DIAGNOSIS = 32908  # Condition Status: Secondary diagnosis
EHR_TYPE = 32817  # Type Concept: EHR
INPATIENT_VISIT = 9201  # Visit: Inpatient Visit
ER_INPATIENT_VISIT = 262  # Visit: Emergency Room and Inpatient Visit
MALE, FEMALE = 8507, 8532  # Gender
ICD_VOCABULARIES = ("ICD10CM", "ICD9CM")  # the source vocabularies read as tokens (vocabulary_id)
SNOMED_VOCABULARY = "SNOMED"  # the standard vocabulary of conditions (vocabulary_id)
