"""The Athena vocabulary download as data: its files, their columns, and how its relationships and
classes correspond to SNOMED CT's (``docs/input-formats.md``, "Athena vocabulary download").

An Athena download (https://athena.ohdsi.org) is a folder of TAB-separated files in the OMOP CDM v5.4
vocabulary layout: a header line, one row per line, dates as ``YYYYMMDD``. Concepts carry OMOP integer
ids; a SNOMED concept's ``concept_code`` is its SCTID. SNOMED's attribute relationships appear in
CONCEPT_RELATIONSHIP under OHDSI's own relationship ids (``Has finding site``, ...), each with its reverse
(``Finding site of``); :data:`RELATIONSHIPS` is the one table that turns them back into SNOMED attribute
types, and the export writes through the same table, so a round trip keeps every relation it lists.
Nothing here reads files.
"""

from __future__ import annotations

# file name -> columns, in order (OMOP CDM v5.4 vocabulary tables)
FILES: dict[str, tuple[str, ...]] = {
    "CONCEPT.csv": (
        "concept_id", "concept_name", "domain_id", "vocabulary_id", "concept_class_id", "standard_concept",
        "concept_code", "valid_start_date", "valid_end_date", "invalid_reason",
    ),
    "CONCEPT_RELATIONSHIP.csv": (
        "concept_id_1", "concept_id_2", "relationship_id", "valid_start_date", "valid_end_date",
        "invalid_reason",
    ),
    "CONCEPT_SYNONYM.csv": ("concept_id", "concept_synonym_name", "language_concept_id"),
    "CONCEPT_ANCESTOR.csv": (
        "ancestor_concept_id", "descendant_concept_id", "min_levels_of_separation",
        "max_levels_of_separation",
    ),
    "RELATIONSHIP.csv": (
        "relationship_id", "relationship_name", "is_hierarchical", "defines_ancestry",
        "reverse_relationship_id", "relationship_concept_id",
    ),
    "VOCABULARY.csv": (
        "vocabulary_id", "vocabulary_name", "vocabulary_reference", "vocabulary_version",
        "vocabulary_concept_id",
    ),
    "DOMAIN.csv": ("domain_id", "domain_name", "domain_concept_id"),
    "CONCEPT_CLASS.csv": ("concept_class_id", "concept_class_name", "concept_class_concept_id"),
}  # fmt: skip
REQUIRED = ("CONCEPT.csv", "CONCEPT_RELATIONSHIP.csv")  # the others are read when present
ENGLISH = 4180186  # language_concept_id of English synonyms
SNOMED = "SNOMED"
ICD_VOCABULARIES = ("ICD10CM", "ICD9CM")
OPEN_END = 20991231  # valid_end_date of a row that is valid now
MAPS_TO, MAPPED_FROM = "Maps to", "Mapped from"

# OHDSI relationship id -> (SNOMED attribute type SCTID, reverse relationship id). Is a first.
RELATIONSHIPS: dict[str, tuple[int, str]] = {
    "Is a": (116680003, "Subsumes"),
    "Has finding site": (363698007, "Finding site of"),
    "Has asso morph": (116676008, "Asso morph of"),
    "Has causative agent": (246075003, "Causative agent of"),
    "Has laterality": (272741003, "Laterality of"),
    "Has clinical course": (263502005, "Clinical course of"),
    "Has severity": (246112005, "Severity of"),
    "Has episodicity": (246456000, "Episodicity of"),
    "Has due to": (42752001, "Due to of"),
    "Followed by": (255234002, "Follows"),
    "Occurs after": (363708005, "Occurs before"),
    "Has occurrence": (246454002, "Occurrence of"),
    "Has pathology": (370135005, "Pathology of"),
    "Has interpretation": (363713009, "Interpretation of"),
    "Has interprets": (363714003, "Interprets of"),
    "Finding asso with": (47429007, "Asso with finding"),
    "Has manifestation": (363705008, "Manifestation of"),
    "Using finding method": (418775008, "Finding method of"),
    "Using finding inform": (419066007, "Finding inform of"),
    "Has asso finding": (246090004, "Asso finding of"),
    "Has asso proc": (363589002, "Asso proc of"),
    "Has finding context": (408729009, "Finding context of"),
    "Has temporal context": (408731000, "Temporal context of"),
    "Has relat context": (408732007, "Relat context of"),
    "Has proc context": (408730004, "Proc context of"),
    "Has method": (260686004, "Method of"),
    "Has proc site": (363704007, "Proc site of"),
    "Has dir proc site": (405813007, "Dir proc site of"),
    "Has indir proc site": (405814001, "Indir proc site of"),
    "Has dir morph": (363700003, "Dir morph of"),
    "Has indir morph": (363709002, "Indir morph of"),
    "Has dir subst": (363701004, "Dir subst of"),
    "Has dir device": (363699004, "Dir device of"),
    "Has indir device": (363710007, "Indir device of"),
    "Using device": (424226004, "Device used by"),
    "Using acc device": (425391005, "Acc device used by"),
    "Using subst": (424361007, "Subst used by"),
    "Using energy": (424244007, "Energy used by"),
    "Has access": (260507000, "Access of"),
    "Has priority": (260870009, "Priority of"),
    "Has surgical appr": (424876005, "Surgical appr of"),
    "Has intent": (363703001, "Intent of"),
    "Has revision status": (246513007, "Revision status of"),
    "Has route of admin": (410675002, "Route of admin of"),
    "Has focus": (363702006, "Focus of"),
    "Has component": (246093002, "Component of"),
    "Has specimen": (116686009, "Specimen of"),
    "Has measurement": (370129005, "Measurement of"),
    "Has property": (370130000, "Property of"),
    "Has scale type": (370132008, "Scale type of"),
    "Has time aspect": (370134009, "Time aspect of"),
    "Has inherent loc": (718497002, "Inherent loc of"),
    "During": (371881003, "Occurs during"),
    "Temp related to": (726633004, "Temp related from"),
    "Has proc morph": (405816004, "Proc morph of"),
    "Has active ing": (127489000, "Active ing of"),
    "Inheres in": (704319004, "Has inherent"),
    "Has precondition": (704326004, "Precondition of"),
}
ATTRIBUTE_OF: dict[int, str] = {sctid: rid for rid, (sctid, _rev) in RELATIONSHIPS.items()}
REVERSES = frozenset(rev for _sctid, rev in RELATIONSHIPS.values())
# relationship ids of the historical associations (SNOMED's REPLACED BY and SAME AS refsets)
HISTORICAL: dict[str, int] = {
    "Concept replaced by": 900000000000526001,
    "Concept same_as to": 900000000000527005,
}
# relationship ids an Athena download holds that are not concept-model attributes (read, not counted as
# unknown): mappings, history, module and status, and other vocabularies' links
NOT_ATTRIBUTES = frozenset(
    {
        MAPS_TO,
        MAPPED_FROM,
        "Maps to value",
        "Value mapped from",
        "Concept replaces",
        "Concept same_as from",
        "Concept poss_eq to",
        "Concept poss_eq from",
        "Concept was_a to",
        "Concept was_a from",
        "Concept alt_to to",
        "Concept alt_to from",
        "Has Module",
        "Module of",
        "Has status",
        "Status of",
        *HISTORICAL,
    }
)

# semantic tag -> (OMOP domain, concept class) of a SNOMED concept
SNOMED_CLASSES: dict[str, tuple[str, str]] = {
    "disorder": ("Condition", "Disorder"),
    "finding": ("Condition", "Clinical Finding"),
    "situation": ("Observation", "Context-dependent"),
    "event": ("Observation", "Event"),
    "body structure": ("Spec Anatomic Site", "Body Structure"),
    "morphologic abnormality": ("Observation", "Morph Abnormality"),
    "organism": ("Observation", "Organism"),
    "substance": ("Observation", "Substance"),
    "qualifier value": ("Meas Value", "Qualifier Value"),
    "procedure": ("Procedure", "Procedure"),
    "observable entity": ("Measurement", "Observable Entity"),
    "physical object": ("Device", "Physical Object"),
    "product": ("Drug", "Pharma/Biol Product"),
    "attribute": ("Metadata", "Attribute"),
    "linkage concept": ("Metadata", "Linkage Concept"),
    "foundation metadata concept": ("Metadata", "Model Comp"),
    "core metadata concept": ("Metadata", "Model Comp"),
    "namespace concept": ("Metadata", "Namespace Concept"),
    "metadata": ("Metadata", "Model Comp"),
    "root": ("Metadata", "Model Comp"),
    "navigational concept": ("Observation", "Navi Concept"),
}
DEFAULT_CLASS = ("Observation", "Concept")  # a tag not listed above
SEMANTIC_TAGS = frozenset(SNOMED_CLASSES)  # the tags whose trailing "(tag)" marks a synonym as the FSN
# ids of the concepts an export writes (real Athena ids are arbitrary integers)
ID_BASE = {"SNOMED": 4_000_000, "ICD10CM": 45_000_000, "ICD9CM": 44_800_000}
