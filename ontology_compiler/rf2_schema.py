"""RF2 grammar as data: file-name pattern, column lists per file kind, and constant SCTIDs.

See ``docs/input-formats.md``, "RF2 release". Nothing here reads files; readers and writers share these
tables.
"""

from __future__ import annotations

import datetime as _dt
import re

# <type>_<pattern?Refset_><content><_?><Full|Snapshot|Delta><-lang?>_<namespace>_<YYYYMMDD>.txt
FILE_NAME_RE = re.compile(
    r"^(?P<type>sct2|der2)_"
    r"(?:(?P<pattern>[a-z]*)Refset_)?"
    r"(?P<content>[A-Za-z]+?)_?"
    r"(?P<release>Full|Snapshot|Delta)"
    r"(?:-(?P<lang>[A-Za-z]{2,3}(?:-[A-Za-z0-9]+)*))?"
    r"_(?P<namespace>[A-Za-z0-9]+)_(?P<date>\d{8})\.txt$"
)

# Column lists, in order, per content kind (the `content` group of FILE_NAME_RE).
_DESCRIPTION = (
    "id",
    "effectiveTime",
    "active",
    "moduleId",
    "conceptId",
    "languageCode",
    "typeId",
    "term",
    "caseSignificanceId",
)
_RELATIONSHIP = ("id", "effectiveTime", "active", "moduleId", "sourceId", "destinationId",
                 "relationshipGroup", "typeId", "characteristicTypeId", "modifierId")  # fmt: skip
_REFSET = ("id", "effectiveTime", "active", "moduleId", "refsetId", "referencedComponentId")

COLUMNS: dict[str, tuple[str, ...]] = {
    "Concept": ("id", "effectiveTime", "active", "moduleId", "definitionStatusId"),
    "Description": _DESCRIPTION,
    "TextDefinition": _DESCRIPTION,
    "Relationship": _RELATIONSHIP,
    "StatedRelationship": _RELATIONSHIP,
    "RelationshipConcreteValues": (
        "id",
        "effectiveTime",
        "active",
        "moduleId",
        "sourceId",
        "value",
        "relationshipGroup",
        "typeId",
        "characteristicTypeId",
        "modifierId",
    ),
    "Language": (*_REFSET, "acceptabilityId"),
    "ExtendedMap": (
        *_REFSET,
        "mapGroup",
        "mapPriority",
        "mapRule",
        "mapAdvice",
        "mapTarget",
        "correlationId",
        "mapCategoryId",
    ),
    "SimpleMap": (*_REFSET, "mapTarget"),
    "Association": (*_REFSET, "targetComponentId"),
    "AssociationReference": (*_REFSET, "targetComponentId"),
    "OWLExpression": (*_REFSET, "owlExpression"),
}

# Columns holding SCTIDs (checked for digits and the Verhoeff check digit). Refset member ids are UUIDs.
_REL_IDS = ("id", "moduleId", "sourceId", "destinationId", "typeId", "characteristicTypeId", "modifierId")
_DESC_IDS = ("id", "moduleId", "conceptId", "typeId", "caseSignificanceId")
_ASSOC_IDS = ("moduleId", "refsetId", "referencedComponentId", "targetComponentId")
SCTID_COLUMNS: dict[str, tuple[str, ...]] = {
    "Concept": ("id", "moduleId", "definitionStatusId"),
    "Description": _DESC_IDS,
    "TextDefinition": _DESC_IDS,
    "Relationship": _REL_IDS,
    "StatedRelationship": _REL_IDS,
    "RelationshipConcreteValues": (
        "id",
        "moduleId",
        "sourceId",
        "typeId",
        "characteristicTypeId",
        "modifierId",
    ),
    "Language": ("moduleId", "refsetId", "referencedComponentId", "acceptabilityId"),
    "ExtendedMap": ("moduleId", "refsetId", "referencedComponentId", "correlationId", "mapCategoryId"),
    "SimpleMap": ("moduleId", "refsetId", "referencedComponentId"),
    "Association": _ASSOC_IDS,
    "AssociationReference": _ASSOC_IDS,
    "OWLExpression": ("moduleId", "refsetId", "referencedComponentId"),
}

# Integer (non-SCTID) columns.
INT_COLUMNS = ("effectiveTime", "active", "relationshipGroup", "mapGroup", "mapPriority")

# Constant SCTIDs (docs/input-formats.md, "RF2 release").
ROOT = 138875005
IS_A = 116680003
FSN = 900000000000003001
SYNONYM = 900000000000013009
DEFINITION = 900000000000550004
INFERRED = 900000000000011006
STATED = 900000000000010007
ADDITIONAL = 900000000000227009
PREFERRED = 900000000000548007
ACCEPTABLE = 900000000000549004
US_ENGLISH = 900000000000509007
GB_ENGLISH = 900000000000508004
CORE_MODULE = 900000000000207008
MODEL_MODULE = 900000000000012004
ICD10_MAP_MODULE = 449080006
PRIMITIVE = 900000000000074008
DEFINED = 900000000000073002
CASE_INSENSITIVE = 900000000000448009
EXISTENTIAL = 900000000000451002
ICD10_MAP_REFSET = 447562003
ICD10CM_MAP_REFSET = 6011000124106
ICD10CM_MAP_MODULE = 5991000124107
MAP_CORRELATION_NOT_SPECIFIED = 447561005
MAP_CATEGORY_PROPERLY_CLASSIFIED = 447637006
MAP_CATEGORY_CANNOT_CLASSIFY = 447638001
MAP_CATEGORY_CONTEXT_DEPENDENT = 447639009
REPLACED_BY = 900000000000526001
SAME_AS = 900000000000527005
# Further metadata concepts a written release describes (the compiler itself does not need them).
MODEL_COMPONENT = 900000000000441003
CONCEPT_MODEL_ATTRIBUTE = 410662002
FOUNDATION_METADATA = 900000000000454005
MODULE = 900000000000443000
US_MODULE = 731000124108
CASE_SENSITIVE = 900000000000017005
INITIAL_CHAR_INSENSITIVE = 900000000000020002
MAP_CATEGORY = 447634004

# The metadata concepts of a release (modules, description and relationship types, definition status,
# case significance, modifiers, refsets, map categories, the model component): SCTID -> (term, semantic
# tag); the FSN is "term (tag)" (metadata_fsn). Every writer of RF2 releases takes its metadata concepts
# from here: tests/data/make_rf2_fixture.py, benchmarks/synthetic_release.py and pipelines/demo (which
# gives its root and modules demo names of its own). Terms are short forms of the real ones.
METADATA_CONCEPTS: dict[int, tuple[str, str]] = {
    ROOT: ("SNOMED CT Concept", "SNOMED RT+CTV3"),
    MODEL_COMPONENT: ("SNOMED CT Model Component", "metadata"),
    CONCEPT_MODEL_ATTRIBUTE: ("Concept model attribute", "attribute"),
    IS_A: ("Is a", "attribute"),
    FOUNDATION_METADATA: ("Foundation metadata concept", "foundation metadata concept"),
    MODULE: ("Module", "core metadata concept"),
    CORE_MODULE: ("SNOMED CT core module", "core metadata concept"),
    MODEL_MODULE: ("SNOMED CT model component module", "core metadata concept"),
    ICD10_MAP_MODULE: ("SNOMED CT to ICD-10 rule-based mapping module", "core metadata concept"),
    US_MODULE: ("US National Library of Medicine maintained module", "core metadata concept"),
    ICD10CM_MAP_MODULE: ("SNOMED CT to ICD-10-CM rule-based mapping module", "core metadata concept"),
    FSN: ("Fully specified name", "core metadata concept"),
    SYNONYM: ("Synonym", "core metadata concept"),
    DEFINITION: ("Definition", "core metadata concept"),
    INFERRED: ("Inferred relationship", "core metadata concept"),
    STATED: ("Stated relationship", "core metadata concept"),
    ADDITIONAL: ("Additional relationship", "core metadata concept"),
    EXISTENTIAL: ("Existential restriction modifier", "core metadata concept"),
    PRIMITIVE: ("Primitive definition status", "core metadata concept"),
    DEFINED: ("Sufficiently defined definition status", "core metadata concept"),
    CASE_INSENSITIVE: ("Entire term case insensitive", "core metadata concept"),
    CASE_SENSITIVE: ("Entire term case sensitive", "core metadata concept"),
    INITIAL_CHAR_INSENSITIVE: ("Only initial character case insensitive", "core metadata concept"),
    PREFERRED: ("Preferred", "foundation metadata concept"),
    ACCEPTABLE: ("Acceptable", "foundation metadata concept"),
    US_ENGLISH: ("United States of America English language reference set", "foundation metadata concept"),
    GB_ENGLISH: ("Great Britain English language reference set", "foundation metadata concept"),
    ICD10_MAP_REFSET: ("ICD-10 complex map reference set", "foundation metadata concept"),
    ICD10CM_MAP_REFSET: ("ICD-10-CM complex map reference set", "foundation metadata concept"),
    MAP_CATEGORY: ("ICD-10 map category value", "foundation metadata concept"),
    MAP_CORRELATION_NOT_SPECIFIED: ("Map correlation not specified", "foundation metadata concept"),
    MAP_CATEGORY_PROPERLY_CLASSIFIED: ("Map source concept is properly classified",
                                       "foundation metadata concept"),
    MAP_CATEGORY_CANNOT_CLASSIFY: ("Map source concept cannot be classified", "foundation metadata concept"),
    MAP_CATEGORY_CONTEXT_DEPENDENT: ("Map is context dependent", "foundation metadata concept"),
    REPLACED_BY: ("REPLACED BY association reference set", "foundation metadata concept"),
    SAME_AS: ("SAME AS association reference set", "foundation metadata concept"),
}  # fmt: skip


def metadata_fsn(sctid: int) -> str:
    """The fully specified name of the metadata concept ``sctid`` (a key of METADATA_CONCEPTS)."""
    term, tag = METADATA_CONCEPTS[sctid]
    return f"{term} ({tag})"


def is_calendar_date(yyyymmdd: str | int) -> bool:
    """True when ``yyyymmdd`` (eight digits) is a real calendar date (20201341 and 20210229 are not)."""
    s = str(yyyymmdd)
    if len(s) != 8 or not s.isdigit():
        return False
    try:
        _dt.date(int(s[:4]), int(s[4:6]), int(s[6:]))
    except ValueError:
        return False
    return True
