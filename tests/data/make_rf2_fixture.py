"""Generate the hand-made RF2 fixture release ``tests/data/snomed_mini_20220531/``.

Run ``python tests/data/make_rf2_fixture.py`` from the repository root (or anywhere) to regenerate the
folder and ``tests/data/snomed_mini_expected.json``; the output is deterministic (byte-identical on
every run). See ``tests/data/README.md`` for the layout and the table of edge cases.

The release is built as an in-memory model: a list of row versions per RF2 file kind. The Full files
hold every version, the Snapshot files the latest version per id, and the expected-results JSON is
computed from the model itself (never by reading the files back through the compiler).

Clinical content uses synthetic, Verhoeff-valid SCTIDs (items from 9990001) with terms written for
this fixture; they are not real SNOMED CT concepts. Metadata concepts (root, attributes, modules,
refsets, description types, ...) use the real constant SCTIDs of ``rf2_schema``.
"""

from __future__ import annotations

import json
import logging
import shutil
import sys
import uuid
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

_REPO = Path(__file__).resolve().parents[2]
if str(_REPO) not in sys.path:
    sys.path.insert(0, str(_REPO))

from ontology_compiler import rf2_schema as S  # noqa: E402
from ontology_compiler.rf2_write import rf2_file_name, rf2_folder, write_rf2_file  # noqa: E402
from ontology_compiler.sctid import (  # noqa: E402
    PARTITION_CONCEPT,
    PARTITION_DESCRIPTION,
    PARTITION_EXT_CONCEPT,
    PARTITION_EXT_DESCRIPTION,
    PARTITION_EXT_RELATIONSHIP,
    PARTITION_RELATIONSHIP,
    is_valid,
    make_sctid,
    verhoeff_valid,
)

log = logging.getLogger("make_rf2_fixture")

OUT_DIR = Path(__file__).resolve().parent / "snomed_mini_20220531"
EXPECTED_JSON = Path(__file__).resolve().parent / "snomed_mini_expected.json"

INT_PACKAGE = "SnomedCT_MiniInternationalRF2_PRODUCTION_20220531T120000Z"
US_PACKAGE = "SnomedCT_MiniUSExtensionRF2_PRODUCTION_20220301T120000Z"
INT_FILE_DATE = "20220531"
US_FILE_DATE = "20220301"
ET_OLD = 20200131
ET_NEW = 20220131
ET_US = 20220301
US_NAMESPACE = "1000124"
US_MODULE = S.US_MODULE
CASE_SENSITIVE = S.CASE_SENSITIVE
MODEL_COMPONENT = S.MODEL_COMPONENT
CONCEPT_MODEL_ATTRIBUTE = S.CONCEPT_MODEL_ATTRIBUTE

# Constant SCTIDs not in rf2_schema (real ids of content concepts; every written id is Verhoeff-checked).
CLINICAL_FINDING = 404684003
BODY_STRUCTURE = 123037004
QUALIFIER_VALUE = 362981000
ORGANISM = 410607006
SUBSTANCE = 105590001
OBSERVABLE = 363787002
PRODUCT = 373873005
FINDING_SITE = 363698007
MORPHOLOGY = 116676008
CAUSATIVE_AGENT = 246075003
LATERALITY = 272741003
DUE_TO = 42752001
SEVERITY = 246112005
HAS_ACTIVE_INGREDIENT = 127489000
STRENGTH_NUMERATOR_VALUE = 1142135004
COUNT_OF_BASE = 1142139005
FEMALE = 248152002
AGE_AT_ONSET = 445518008

STOPWORDS = "a an and the of with without in on or to for by at from as due nos".split()

_UUID_NS = uuid.uuid5(uuid.NAMESPACE_URL, "https://hrrbert.invalid/tests/data/snomed_mini_20220531")


def member_uuid(key: str) -> str:
    """Deterministic refset member id."""
    return str(uuid.uuid5(_UUID_NS, key))


# ----------------------------------------------------------------------------------------------------
# In-memory model
# ----------------------------------------------------------------------------------------------------


@dataclass
class Package:
    """One release package: row versions per file kind, plus the current state per id."""

    name: str
    namespace: str
    file_date: str
    full: dict[str, list[dict[str, Any]]] = field(default_factory=lambda: defaultdict(list))
    current: dict[str, dict[Any, dict[str, Any]]] = field(default_factory=lambda: defaultdict(dict))

    def add(self, kind: str, row: dict[str, Any]) -> dict[str, Any]:
        """Record a row version (append to Full, overwrite the current state of its id)."""
        assert tuple(row) == S.COLUMNS[kind], (kind, tuple(row))
        prev = self.current[kind].get(row["id"])
        if prev is not None:
            assert row["effectiveTime"] > prev["effectiveTime"], (kind, row["id"])
        self.full[kind].append(row)
        self.current[kind][row["id"]] = row
        return row

    def change(self, kind: str, rid: Any, et: int, **updates: Any) -> dict[str, Any]:
        """A new version of ``rid`` at ``et`` with some fields changed."""
        row = dict(self.current[kind][rid])
        row.update(updates, effectiveTime=et)
        return self.add(kind, row)


def resolve(rows: list[dict[str, Any]], as_of: int) -> dict[Any, dict[str, Any]]:
    """Full -> snapshot at ``as_of``: per id, the version with the greatest effectiveTime <= as_of."""
    out: dict[Any, dict[str, Any]] = {}
    for r in rows:
        if r["effectiveTime"] <= as_of and (
            r["id"] not in out or r["effectiveTime"] > out[r["id"]]["effectiveTime"]
        ):
            out[r["id"]] = r
    return out


class Builder:
    """Helpers that add concepts, descriptions, relationships and refset rows to a package."""

    def __init__(
        self, pkg: Package, module: int, extension: bool, first_item: int, refsets: tuple[int, ...]
    ) -> None:
        self.pkg = pkg
        self.refsets = refsets
        self.module = module
        self.extension = extension
        self.next_desc = first_item
        self.next_rel = first_item
        self.names: dict[int, str] = {}

    def _sctid(self, item: int, part_int: str, part_ext: str) -> int:
        if self.extension:
            return make_sctid(item, part_ext, US_NAMESPACE)
        return make_sctid(item, part_int)

    def concept_id(self, item: int) -> int:
        return self._sctid(item, PARTITION_CONCEPT, PARTITION_EXT_CONCEPT)

    def new_desc_id(self) -> int:
        self.next_desc += 1
        return self._sctid(self.next_desc - 1, PARTITION_DESCRIPTION, PARTITION_EXT_DESCRIPTION)

    def new_rel_id(self) -> int:
        self.next_rel += 1
        return self._sctid(self.next_rel - 1, PARTITION_RELATIONSHIP, PARTITION_EXT_RELATIONSHIP)

    def concept(
        self,
        cid: int,
        fsn: str,
        parents: list[int],
        synonyms: list[str] | None = None,
        *,
        et: int,
        module: int | None = None,
        defined: bool = False,
        active: bool = True,
        case: int = S.CASE_INSENSITIVE,
        gb_only: list[str] | None = None,
        rels_active: bool = True,
    ) -> dict[str, int]:
        """Add a concept with its FSN, synonyms (first = preferred), language rows and is-a rows.

        Returns the description ids by term (FSN under key ``"FSN"``).
        """
        module = module or self.module
        assert is_valid(cid), cid
        self.names[cid] = fsn
        self.pkg.add(
            "Concept",
            {
                "id": cid,
                "effectiveTime": et,
                "active": int(active),
                "moduleId": module,
                "definitionStatusId": S.DEFINED if defined else S.PRIMITIVE,
            },
        )
        if synonyms is None:
            synonyms = [fsn[: fsn.rindex(" (")]] if fsn.endswith(")") and " (" in fsn else []
        ids: dict[str, int] = {}
        ids["FSN"] = self.description(cid, fsn, S.FSN, et=et, module=module, case=case, us="P", gb="P")
        for i, term in enumerate(synonyms):
            acc = "P" if i == 0 else "A"
            ids[term] = self.description(
                cid, term, S.SYNONYM, et=et, module=module, case=case, us=acc, gb=acc
            )
        for term in gb_only or []:
            ids[term] = self.description(
                cid, term, S.SYNONYM, et=et, module=module, case=case, us=None, gb="A"
            )
        for p in parents:
            self.relationship(cid, p, S.IS_A, 0, et=et, module=module, active=rels_active)
        return ids

    def description(
        self,
        cid: int,
        term: str,
        type_id: int,
        *,
        et: int,
        module: int | None = None,
        case: int = S.CASE_INSENSITIVE,
        us: str | None = "A",
        gb: str | None = "A",
        kind: str = "Description",
    ) -> int:
        did = self.new_desc_id()
        module = module or self.module
        self.pkg.add(
            kind,
            {
                "id": did,
                "effectiveTime": et,
                "active": 1,
                "moduleId": module,
                "conceptId": cid,
                "languageCode": "en",
                "typeId": type_id,
                "term": term,
                "caseSignificanceId": case,
            },
        )
        if module == S.MODEL_MODULE:
            gb = None  # keeps the fixture small: metadata concepts are described in US English only
        for refset, acc in ((S.US_ENGLISH, us), (S.GB_ENGLISH, gb)):
            if acc is not None and refset in self.refsets:
                self.language(did, refset, acc, et=et, module=module)
        return did

    def language(self, did: int, refset: int, acc: str, *, et: int, module: int) -> str:
        mid = member_uuid(f"lang:{refset}:{did}")
        self.pkg.add(
            "Language",
            {
                "id": mid,
                "effectiveTime": et,
                "active": 1,
                "moduleId": module,
                "refsetId": refset,
                "referencedComponentId": did,
                "acceptabilityId": S.PREFERRED if acc == "P" else S.ACCEPTABLE,
            },
        )
        return mid

    def relationship(
        self,
        src: int,
        dst: int,
        type_id: int,
        group: int,
        *,
        et: int,
        module: int | None = None,
        active: bool = True,
        kind: str = "Relationship",
    ) -> int:
        rid = self.new_rel_id()
        self.pkg.add(
            kind,
            {
                "id": rid,
                "effectiveTime": et,
                "active": int(active),
                "moduleId": module or self.module,
                "sourceId": src,
                "destinationId": dst,
                "relationshipGroup": group,
                "typeId": type_id,
                "characteristicTypeId": S.STATED if kind == "StatedRelationship" else S.INFERRED,
                "modifierId": S.EXISTENTIAL,
            },
        )
        return rid

    def concrete(self, src: int, value: str, type_id: int, group: int, *, et: int) -> int:
        rid = self.new_rel_id()
        self.pkg.add(
            "RelationshipConcreteValues",
            {
                "id": rid,
                "effectiveTime": et,
                "active": 1,
                "moduleId": self.module,
                "sourceId": src,
                "value": value,
                "relationshipGroup": group,
                "typeId": type_id,
                "characteristicTypeId": S.INFERRED,
                "modifierId": S.EXISTENTIAL,
            },
        )
        return rid

    def map_row(
        self,
        refset: int,
        module: int,
        cid: int,
        group: int,
        priority: int,
        rule: str,
        advice: str,
        target: str,
        category: int,
        *,
        et: int,
    ) -> str:
        mid = member_uuid(f"map:{refset}:{cid}:{group}:{priority}")
        self.pkg.add(
            "ExtendedMap",
            {
                "id": mid,
                "effectiveTime": et,
                "active": 1,
                "moduleId": module,
                "refsetId": refset,
                "referencedComponentId": cid,
                "mapGroup": group,
                "mapPriority": priority,
                "mapRule": rule,
                "mapAdvice": advice,
                "mapTarget": target,
                "correlationId": S.MAP_CORRELATION_NOT_SPECIFIED,
                "mapCategoryId": category,
            },
        )
        return mid

    def association(self, refset: int, src: int, dst: int, *, et: int) -> str:
        mid = member_uuid(f"assoc:{refset}:{src}:{dst}")
        self.pkg.add(
            "Association",
            {
                "id": mid,
                "effectiveTime": et,
                "active": 1,
                "moduleId": self.module,
                "refsetId": refset,
                "referencedComponentId": src,
                "targetComponentId": dst,
            },
        )
        return mid


AGE_RULE = "IFA 445518008 | Age at onset of clinical finding (observable entity) | < 18.0 years"
FEMALE_RULE = "IFA 248152002 | Female (finding) |"
CONTEXT = "MAP OF SOURCE CONCEPT IS CONTEXT DEPENDENT"


def build_international() -> tuple[Package, Builder, dict[str, Any]]:
    """The International package; returns it, its builder and the ids of the edge cases."""
    pkg = Package(INT_PACKAGE, "INT", INT_FILE_DATE)
    b = Builder(pkg, S.CORE_MODULE, extension=False, first_item=9990001, refsets=(S.US_ENGLISH, S.GB_ENGLISH))
    et = ET_OLD
    M = S.MODEL_MODULE

    # --- metadata and top-level hierarchies (real SCTIDs) -------------------------------------------
    b.concept(S.ROOT, S.metadata_fsn(S.ROOT), [], [S.METADATA_CONCEPTS[S.ROOT][0]], et=et)
    for cid, fsn in (
        (CLINICAL_FINDING, "Clinical finding (finding)"),
        (BODY_STRUCTURE, "Body structure (body structure)"),
        (QUALIFIER_VALUE, "Qualifier value (qualifier value)"),
        (ORGANISM, "Organism (organism)"),
        (SUBSTANCE, "Substance (substance)"),
        (OBSERVABLE, "Observable entity (observable entity)"),
        (PRODUCT, "Pharmaceutical / biologic product (product)"),
    ):
        b.concept(cid, fsn, [S.ROOT], et=et)
    b.concept(MODEL_COMPONENT, S.metadata_fsn(MODEL_COMPONENT), [S.ROOT], et=et, module=M)
    b.concept(
        CONCEPT_MODEL_ATTRIBUTE, S.metadata_fsn(CONCEPT_MODEL_ATTRIBUTE), [MODEL_COMPONENT], et=et, module=M
    )
    for cid, fsn in (
        (S.IS_A, S.metadata_fsn(S.IS_A)),
        (FINDING_SITE, "Finding site (attribute)"),
        (MORPHOLOGY, "Associated morphology (attribute)"),
        (CAUSATIVE_AGENT, "Causative agent (attribute)"),
        (LATERALITY, "Laterality (attribute)"),
        (DUE_TO, "Due to (attribute)"),
        (SEVERITY, "Severity (attribute)"),
        (HAS_ACTIVE_INGREDIENT, "Has active ingredient (attribute)"),
        (STRENGTH_NUMERATOR_VALUE, "Has presentation strength numerator value (attribute)"),
        (COUNT_OF_BASE, "Count of base of active ingredient (attribute)"),
    ):
        b.concept(cid, fsn, [CONCEPT_MODEL_ATTRIBUTE], et=et, module=M)
    for cid in (
        S.FSN,
        S.SYNONYM,
        S.DEFINITION,
        S.INFERRED,
        S.STATED,
        S.ADDITIONAL,
        S.PREFERRED,
        S.ACCEPTABLE,
        S.US_ENGLISH,
        S.GB_ENGLISH,
        S.CORE_MODULE,
        S.MODEL_MODULE,
        S.ICD10_MAP_MODULE,
        S.PRIMITIVE,
        S.DEFINED,
        S.CASE_INSENSITIVE,
        S.CASE_SENSITIVE,
        S.EXISTENTIAL,
        S.ICD10_MAP_REFSET,
        S.MAP_CORRELATION_NOT_SPECIFIED,
        S.MAP_CATEGORY_PROPERLY_CLASSIFIED,
        S.MAP_CATEGORY_CANNOT_CLASSIFY,
        S.MAP_CATEGORY_CONTEXT_DEPENDENT,
        S.REPLACED_BY,
        S.SAME_AS,
    ):
        b.concept(cid, S.metadata_fsn(cid), [MODEL_COMPONENT], et=et, module=M)

    # --- supporting clinical content (synthetic SCTIDs) ---------------------------------------------
    c = b.concept_id
    kidney, bronchus, intestine, appendix = c(9990001), c(9990002), c(9990003), c(9990004)
    pharynx, inner_ear, lacrimal, salivary = c(9990005), c(9990006), c(9990007), c(9990008)
    bone, femur = c(9990009), c(9990010)
    inflammation, acute_inflammation, fracture = c(9990011), c(9990012), c(9990013)
    bacterium, streptococcus = c(9990014), c(9990015)
    metformin, amoxicillin = c(9990016), c(9990017)
    left = c(9990018)
    metformin_tab, amoxicillin_cap = c(9990020), c(9990021)
    bs = "(body structure)"
    for cid, fsn, parents in (
        (kidney, f"Kidney structure {bs}", [BODY_STRUCTURE]),
        (bronchus, f"Bronchial structure {bs}", [BODY_STRUCTURE]),
        (intestine, f"Intestinal structure {bs}", [BODY_STRUCTURE]),
        (appendix, f"Appendix structure {bs}", [intestine]),
        (pharynx, f"Pharyngeal structure {bs}", [BODY_STRUCTURE]),
        (inner_ear, f"Inner ear structure {bs}", [BODY_STRUCTURE]),
        (lacrimal, f"Tear gland structure {bs}", [BODY_STRUCTURE]),
        (salivary, f"Saliva gland structure {bs}", [BODY_STRUCTURE]),
        (bone, f"Bone tissue structure {bs}", [BODY_STRUCTURE]),
        (femur, f"Thigh bone structure {bs}", [bone]),
        (inflammation, "Inflammatory change (morphologic abnormality)", [BODY_STRUCTURE]),
        (acute_inflammation, "Acute inflammatory change (morphologic abnormality)", [inflammation]),
        (fracture, "Broken bone (morphologic abnormality)", [BODY_STRUCTURE]),
        (bacterium, "Bacterial organism (organism)", [ORGANISM]),
        (streptococcus, "Streptococcus species (organism)", [bacterium]),
        (metformin, "Metformin (substance)", [SUBSTANCE]),
        (amoxicillin, "Amoxicillin (substance)", [SUBSTANCE]),
        (left, "Left side (qualifier value)", [QUALIFIER_VALUE]),
    ):
        b.concept(cid, fsn, parents, et=et)
    b.concept(FEMALE, "Female (finding)", [CLINICAL_FINDING], et=et)
    b.concept(AGE_AT_ONSET, "Age at onset of clinical finding (observable entity)", [OBSERVABLE], et=et)
    b.concept(metformin_tab, "Metformin 500 mg oral tablet (clinical drug)", [PRODUCT], et=et, defined=True)
    b.concept(
        amoxicillin_cap, "Amoxicillin 250 mg oral capsule (clinical drug)", [PRODUCT], et=et, defined=True
    )
    b.relationship(metformin_tab, metformin, HAS_ACTIVE_INGREDIENT, 1, et=et)
    b.relationship(amoxicillin_cap, amoxicillin, HAS_ACTIVE_INGREDIENT, 1, et=et)
    cv = [
        b.concrete(metformin_tab, "#500", STRENGTH_NUMERATOR_VALUE, 1, et=et),
        b.concrete(metformin_tab, "#1", COUNT_OF_BASE, 0, et=et),
        b.concrete(amoxicillin_cap, "#250", STRENGTH_NUMERATOR_VALUE, 1, et=et),
    ]

    # --- disorders ----------------------------------------------------------------------------------
    disease, metabolic, dm, t2dm = c(9990101), c(9990102), c(9990103), c(9990104)
    kidney_dis, dkd, respiratory, asthma = c(9990105), c(9990106), c(9990107), c(9990108)
    child_asthma, appendicitis, acute_app, hypertension = c(9990109), c(9990110), c(9990111), c(9990112)
    meniere, sjogren, strep_inf, pharyngitis = c(9990113), c(9990114), c(9990115), c(9990116)
    strep_phar, osteoporosis, femur_fx, ida = c(9990117), c(9990118), c(9990119), c(9990120)
    crohn, dm_nc, resp_disorder = c(9990121), c(9990122), c(9990123)
    d = "(disorder)"
    cs = CASE_SENSITIVE

    b.concept(disease, f"Disease {d}", [CLINICAL_FINDING], ["Disease", "Illness"], et=et)
    b.concept(
        metabolic, f"Metabolic disease {d}", [disease], ["Metabolic disease", "Disorder of metabolism"], et=et
    )
    b.concept(dm, f"Diabetes mellitus {d}", [metabolic], ["Diabetes mellitus", "Diabetes"], et=et)
    t2dm_d = b.concept(
        t2dm,
        f"Type 2 diabetes mellitus {d}",
        [dm],
        [
            "Type 2 diabetes mellitus",
            "Non-insulin-dependent diabetes mellitus, type 2",
            "Adult-onset diabetes",
        ],
        et=et,
    )
    b.concept(
        kidney_dis, f"Kidney disease {d}", [disease], ["Kidney disease", "Renal disease"], et=et, defined=True
    )
    b.concept(
        dkd,
        f"Kidney disease due to type 2 diabetes mellitus {d}",
        [t2dm, kidney_dis],  # polyhierarchy
        ["Kidney disease due to type 2 diabetes mellitus", "Diabetic kidney disease in type 2 diabetes"],
        et=et,
        defined=True,
    )
    b.concept(
        respiratory,
        f"Respiratory disease {d}",
        [disease],
        ["Respiratory disease", "Disorder of lungs"],
        et=et,
    )
    asthma_d = b.concept(asthma, f"Asthma {d}", [respiratory], ["Asthma", "Reactive airway disease"], et=et)
    b.concept(child_asthma, f"Asthma with onset in childhood {d}", [asthma], ["Childhood asthma"], et=et)
    b.concept(
        appendicitis, f"Appendicitis {d}", [disease], ["Appendicitis", "Inflammation of the appendix"], et=et
    )
    b.concept(
        acute_app, f"Acute appendicitis {d}", [appendicitis], ["Acute appendicitis"], et=et, defined=True
    )
    htn_d = b.concept(
        hypertension, f"Hypertensive disorder {d}", [disease], ["Hypertension", "High blood pressure"], et=et
    )
    b.concept(
        meniere,
        f"Ménière disease {d}",
        [disease],
        ["Ménière disease", "Meniere disease", "Endolymphatic hydrops of inner ear"],
        et=et,
        case=cs,
    )
    b.concept(
        sjogren,
        f"Sjögren syndrome {d}",
        [disease],
        ["Sjögren syndrome", "Sjogren syndrome", "Sicca syndrome with dryness of the eyes and mouth"],
        et=et,
        case=cs,
    )
    b.concept(
        strep_inf,
        f"Infection caused by Streptococcus {d}",
        [disease],
        ["Streptococcal infection", "Strep infection"],
        et=et,
        defined=True,
    )
    b.concept(pharyngitis, f"Pharyngitis {d}", [respiratory], ["Pharyngitis", "Sore throat"], et=et)
    b.concept(
        strep_phar,
        f"Pharyngitis caused by Streptococcus {d}",
        [strep_inf, pharyngitis],  # polyhierarchy
        ["Streptococcal pharyngitis", "Strep throat (acute, bacterial) - pharynx"],
        et=et,
        defined=True,
    )
    b.concept(
        osteoporosis, f"Osteoporosis {d}", [disease], ["Osteoporosis", "Low bone density disorder"], et=et
    )
    b.concept(
        femur_fx,
        f"Fracture of left femur {d}",
        [disease],
        ["Fracture of left femur", "Broken left thigh bone", "Left femoral fracture"],
        et=et,
        defined=True,
    )
    ida_d = b.concept(
        ida,
        f"Anemia due to iron deficiency {d}",
        [metabolic],
        ["Iron deficiency anemia", "Iron-deficiency anemia"],
        gb_only=["Iron deficiency anaemia"],
        et=et,
    )
    b.concept(
        crohn,
        f"Crohn's disease {d}",
        [disease],
        ["Crohn's disease", "Regional enteritis", "Crohn\u2019s ileitis and colitis"],
        et=et,
        case=cs,
    )
    dm_nc_d = b.concept(
        dm_nc, f"Diabetes mellitus without complication {d}", [dm], ["Uncomplicated diabetes mellitus"], et=et
    )
    resp_disorder_d = b.concept(
        resp_disorder,
        f"Respiratory disorder {d}",
        [disease],
        ["Respiratory disorder"],
        et=et,
        active=False,
        rels_active=False,
    )

    # attribute relationships (inferred; is-a rows above are group 0)
    r = b.relationship
    r(kidney_dis, kidney, FINDING_SITE, 1, et=et)
    r(dkd, kidney, FINDING_SITE, 1, et=et)
    r(dkd, t2dm, DUE_TO, 2, et=et)
    r(asthma, bronchus, FINDING_SITE, 1, et=et)
    r(asthma, inflammation, MORPHOLOGY, 1, et=et)
    r(child_asthma, bronchus, FINDING_SITE, 1, et=et)
    r(child_asthma, inflammation, MORPHOLOGY, 1, et=et)
    rel_old = r(appendicitis, intestine, FINDING_SITE, 1, et=et)
    r(appendicitis, inflammation, MORPHOLOGY, 1, et=et)
    r(acute_app, appendix, FINDING_SITE, 1, et=et)
    r(acute_app, acute_inflammation, MORPHOLOGY, 1, et=et)
    r(meniere, inner_ear, FINDING_SITE, 1, et=et)
    r(sjogren, lacrimal, FINDING_SITE, 1, et=et)
    r(sjogren, inflammation, MORPHOLOGY, 1, et=et)
    r(sjogren, salivary, FINDING_SITE, 2, et=et)
    r(sjogren, inflammation, MORPHOLOGY, 2, et=et)
    r(strep_inf, streptococcus, CAUSATIVE_AGENT, 1, et=et)
    r(pharyngitis, pharynx, FINDING_SITE, 1, et=et)
    r(pharyngitis, inflammation, MORPHOLOGY, 1, et=et)
    r(strep_phar, pharynx, FINDING_SITE, 1, et=et)
    r(strep_phar, inflammation, MORPHOLOGY, 1, et=et)
    r(strep_phar, streptococcus, CAUSATIVE_AGENT, 1, et=et)
    r(osteoporosis, bone, FINDING_SITE, 1, et=et)
    r(femur_fx, femur, FINDING_SITE, 1, et=et)
    r(femur_fx, fracture, MORPHOLOGY, 1, et=et)
    r(femur_fx, left, LATERALITY, 1, et=et)
    r(crohn, intestine, FINDING_SITE, 1, et=et)
    r(crohn, inflammation, MORPHOLOGY, 1, et=et)
    r(resp_disorder, bronchus, FINDING_SITE, 1, et=et, active=False)
    dm_nc_isa = next(
        row["id"] for row in pkg.full["Relationship"] if row["sourceId"] == dm_nc and row["typeId"] == S.IS_A
    )

    # stated relationships (legacy file; a few rows)
    for src, dst, typ, grp in (
        (t2dm, dm, S.IS_A, 0),
        (asthma, respiratory, S.IS_A, 0),
        (strep_phar, strep_inf, S.IS_A, 0),
        (strep_phar, pharyngitis, S.IS_A, 0),
        (asthma, bronchus, FINDING_SITE, 1),
    ):
        r(src, dst, typ, grp, et=et, kind="StatedRelationship")

    # text definitions (preferred in both dialects)
    for cid, text in (
        (
            t2dm,
            "A form of diabetes mellitus in which the body still makes insulin but responds poorly to it.",
        ),
        (asthma, "Long-term disease of the airways with recurring, reversible narrowing and wheeze."),
        (meniere, "Disorder of the inner ear with episodes of vertigo, ringing in the ear and hearing loss."),
    ):
        b.description(cid, text, S.DEFINITION, et=et, us="P", gb="P", kind="TextDefinition")

    # ICD-10 map (module 449080006, refset 447562003)
    P, U, X = (
        S.MAP_CATEGORY_PROPERLY_CLASSIFIED,
        S.MAP_CATEGORY_CANNOT_CLASSIFY,
        S.MAP_CATEGORY_CONTEXT_DEPENDENT,
    )

    def mp(cid: int, g: int, p: int, rule: str, advice: str, target: str, cat: int, when: int = et) -> str:
        return b.map_row(
            S.ICD10_MAP_REFSET, S.ICD10_MAP_MODULE, cid, g, p, rule, advice, target, cat, et=when
        )

    mp(disease, 1, 1, "TRUE", "MAP SOURCE CONCEPT CANNOT BE CLASSIFIED WITH AVAILABLE DATA", "", U)
    for cid, code in (
        (dm, "E14.9"),
        (t2dm, "E11.9"),
        (asthma, "J45.9"),
        (appendicitis, "K37"),
        (acute_app, "K35.8"),
        (hypertension, "I10"),
        (meniere, "H81.0"),
        (sjogren, "M35.0"),
        (strep_inf, "A49.1"),
        (pharyngitis, "J02.9"),
        (strep_phar, "J02.0"),
        (femur_fx, "S72.9"),
        (ida, "D50.9"),
        (crohn, "K50.9"),
        (dm_nc, "E14.9"),  # referenced concept inactive at 20220131
    ):
        mp(cid, 1, 1, "TRUE", f"ALWAYS {code}", code, P)
    map_changed = mp(kidney_dis, 1, 1, "TRUE", "ALWAYS N18.9", "N18.9", P)
    mp(dkd, 1, 1, "TRUE", "ALWAYS E11.2", "E11.2", P)
    mp(
        dkd,
        2,
        1,
        "TRUE",
        "ALWAYS N08.3 | POSSIBLE REQUIREMENT FOR ADDITIONAL CODE TO FULLY DESCRIBE DISEASE OR CONDITION",
        "N08.3",
        P,
    )
    mp(
        child_asthma,
        1,
        1,
        AGE_RULE,
        f"IF AGE AT ONSET OF CLINICAL FINDING BEFORE 18.0 YEARS CHOOSE J45.0 | {CONTEXT}",
        "J45.0",
        X,
    )
    mp(child_asthma, 1, 2, "OTHERWISE TRUE", "ALWAYS J45.9", "J45.9", P)
    mp(osteoporosis, 1, 1, FEMALE_RULE, f"IF FEMALE CHOOSE M81.0 | {CONTEXT}", "M81.0", X)
    mp(osteoporosis, 1, 2, "OTHERWISE TRUE", "ALWAYS M81.9", "M81.9", P)
    map_inactive = mp(strep_phar, 2, 1, "TRUE", "ALWAYS B95.5", "B95.5", P)

    # historical associations
    assoc_same_as = b.association(S.SAME_AS, resp_disorder, respiratory, et=et)

    # --- changes at 20220131 -----------------------------------------------------------------------
    new = ET_NEW
    pkg.change("Concept", dm_nc, new, active=0)  # active at 20200131, inactive at 20220131
    assoc_replaced = b.association(S.REPLACED_BY, dm_nc, dm, et=new)
    pkg.change("Relationship", rel_old, new, active=0)  # finding site = intestine ...
    rel_new = r(appendicitis, appendix, FINDING_SITE, 1, et=new)  # ... replaced by finding site = appendix
    desc_changed = htn_d["High blood pressure"]
    pkg.change("Description", desc_changed, new, term="High blood pressure disorder")
    desc_inactive = asthma_d["Reactive airway disease"]
    pkg.change("Description", desc_inactive, new, active=0)
    lang_inactive_with_desc = [
        member_uuid(f"lang:{rs}:{desc_inactive}") for rs in (S.US_ENGLISH, S.GB_ENGLISH)
    ]
    for mid in lang_inactive_with_desc:
        pkg.change("Language", mid, new, active=0)
    gb_lang_inactive = member_uuid(f"lang:{S.GB_ENGLISH}:{t2dm_d['Adult-onset diabetes']}")
    pkg.change("Language", gb_lang_inactive, new, active=0)  # description stays active
    pkg.change("ExtendedMap", map_changed, new, mapAdvice="ALWAYS N28.9", mapTarget="N28.9")
    pkg.change("ExtendedMap", map_inactive, new, active=0)

    ids = {
        "names": b.names,
        "concrete_value_ids": cv,
        "concepts": {
            "disease": disease,
            "diabetes_mellitus": dm,
            "type_2_diabetes": t2dm,
            "kidney_disease": kidney_dis,
            "kidney_disease_due_to_t2dm": dkd,
            "respiratory_disease": respiratory,
            "asthma": asthma,
            "childhood_asthma": child_asthma,
            "appendicitis": appendicitis,
            "hypertension": hypertension,
            "meniere": meniere,
            "sjogren": sjogren,
            "crohn": crohn,
            "strep_pharyngitis": strep_phar,
            "osteoporosis": osteoporosis,
            "iron_deficiency_anemia": ida,
            "femur_fracture": femur_fx,
            "dm_without_complication": dm_nc,
            "respiratory_disorder": resp_disorder,
            "kidney_structure": kidney,
            "bronchial_structure": bronchus,
            "bone_structure": bone,
            "intestine": intestine,
            "appendix": appendix,
            "metformin_tablet": metformin_tab,
            "amoxicillin_capsule": amoxicillin_cap,
        },
        "rel_old": rel_old,
        "rel_new": rel_new,
        "dm_nc_isa": dm_nc_isa,
        "dm_nc_descriptions": sorted(dm_nc_d.values()),
        "resp_disorder_descriptions": sorted(resp_disorder_d.values()),
        "desc_changed": desc_changed,
        "desc_inactive": desc_inactive,
        "lang_inactive_with_desc": lang_inactive_with_desc,
        "gb_lang_inactive": gb_lang_inactive,
        "gb_lang_inactive_desc": t2dm_d["Adult-onset diabetes"],
        "gb_only_desc": ida_d["Iron deficiency anaemia"],
        "map_changed": map_changed,
        "map_inactive": map_inactive,
        "assoc_replaced": assoc_replaced,
        "assoc_same_as": assoc_same_as,
    }
    return pkg, b, ids


def build_us(int_ids: dict[str, Any]) -> tuple[Package, Builder, dict[str, Any]]:
    """The US extension package (namespace 1000124, module 731000124108, long-format ids)."""
    pkg = Package(US_PACKAGE, "US1000124", US_FILE_DATE)
    b = Builder(pkg, US_MODULE, extension=True, first_item=99001, refsets=(S.US_ENGLISH,))
    et = ET_US
    ic = int_ids["concepts"]
    c = b.concept_id
    for cid in (US_MODULE, S.ICD10CM_MAP_MODULE, S.ICD10CM_MAP_REFSET):
        b.concept(cid, S.metadata_fsn(cid), [MODEL_COMPONENT], et=et)
    t2dm_hyper, exercise_asthma, pm_osteo, ckd3 = c(99001), c(99002), c(99003), c(99004)
    d = "(disorder)"
    b.concept(
        t2dm_hyper,
        f"Type 2 diabetes mellitus with hyperglycemia {d}",
        [ic["type_2_diabetes"]],
        ["Type 2 diabetes mellitus with hyperglycemia", "Type 2 diabetes with high blood sugar"],
        et=et,
    )
    b.concept(
        exercise_asthma, f"Exercise-induced asthma {d}", [ic["asthma"]], ["Exercise-induced asthma"], et=et
    )
    b.concept(
        pm_osteo,
        f"Osteoporosis after menopause {d}",
        [ic["osteoporosis"]],
        ["Postmenopausal osteoporosis"],
        et=et,
    )
    b.concept(
        ckd3,
        f"Chronic kidney disease stage 3 due to type 2 diabetes mellitus {d}",
        [ic["kidney_disease_due_to_t2dm"]],
        [
            "Chronic kidney disease stage 3 due to type 2 diabetes mellitus",
            "CKD stage 3 due to type 2 diabetes",
        ],
        et=et,
        defined=True,
    )
    b.relationship(exercise_asthma, ic["bronchial_structure"], FINDING_SITE, 1, et=et)
    b.relationship(pm_osteo, ic["bone_structure"], FINDING_SITE, 1, et=et)
    b.relationship(ckd3, ic["kidney_structure"], FINDING_SITE, 1, et=et)
    b.relationship(ckd3, ic["type_2_diabetes"], DUE_TO, 2, et=et)

    def mp(cid: int, g: int, p: int, rule: str, advice: str, target: str, cat: int) -> str:
        return b.map_row(
            S.ICD10CM_MAP_REFSET, S.ICD10CM_MAP_MODULE, cid, g, p, rule, advice, target, cat, et=et
        )

    P, X = S.MAP_CATEGORY_PROPERLY_CLASSIFIED, S.MAP_CATEGORY_CONTEXT_DEPENDENT
    for cid, code in (
        (t2dm_hyper, "E11.65"),
        (exercise_asthma, "J45.990"),
        (ic["type_2_diabetes"], "E11.9"),
        (ic["asthma"], "J45.909"),
        (ic["hypertension"], "I10"),
    ):
        mp(cid, 1, 1, "TRUE", f"ALWAYS {code}", code, P)
    escaped = mp(
        pm_osteo,
        1,
        1,
        "IFA 248152002 &#x7C; Female (finding) &#x7C;",
        f"IF FEMALE CHOOSE M81.0 &#x7C; {CONTEXT}",
        "M81.0",
        X,
    )
    mp(pm_osteo, 1, 2, "OTHERWISE TRUE", "ALWAYS M81.8", "M81.8", P)
    mp(ckd3, 1, 1, "TRUE", "ALWAYS E11.22", "E11.22", P)
    mp(ckd3, 2, 1, "TRUE", "ALWAYS N18.30", "N18.30", P)
    ids = {
        "names": b.names,
        "concepts": {
            "t2dm_with_hyperglycemia": t2dm_hyper,
            "exercise_induced_asthma": exercise_asthma,
            "postmenopausal_osteoporosis": pm_osteo,
            "ckd3_due_to_t2dm": ckd3,
        },
        "escaped_pipe_map_row": escaped,
    }
    return pkg, b, ids


# ----------------------------------------------------------------------------------------------------
# Expected results, computed from the model
# ----------------------------------------------------------------------------------------------------


def snapshot_of(pkgs: list[Package], as_of: int) -> dict[str, dict[Any, dict[str, Any]]]:
    """Merged snapshot of several packages at ``as_of`` (per kind: id -> row)."""
    out: dict[str, dict[Any, dict[str, Any]]] = defaultdict(dict)
    for pkg in pkgs:
        for kind, rows in pkg.full.items():
            out[kind].update(resolve(rows, as_of))
    return out


def counts(
    snap: dict[str, dict[Any, dict[str, Any]]], universe: dict[str, dict[Any, dict[str, Any]]] | None = None
) -> dict[str, Any]:
    """Row counts of a snapshot, including what a consumer drops because a concept is inactive.

    Concept activity is looked up in ``universe`` (default: ``snap`` itself), so an extension's rows
    can be judged against the International concepts they point to.
    """
    concepts = snap["Concept"]
    all_concepts = (universe or snap)["Concept"]
    active_c = {i for i, r in all_concepts.items() if r["active"]}
    inactive_c = set(all_concepts) - active_c

    def act(kind: str) -> list[dict[str, Any]]:
        return [r for r in snap.get(kind, {}).values() if r["active"]]

    desc = act("Description")
    tdef = act("TextDefinition")
    rels = [r for r in act("Relationship") if r["characteristicTypeId"] == S.INFERRED]
    desc_all = {**snap.get("Description", {}), **snap.get("TextDefinition", {})}
    desc_concept = {i: r["conceptId"] for i, r in desc_all.items()}
    desc_active = {i for i, r in desc_all.items() if r["active"]}
    lang = act("Language")
    lang_on_inactive_desc = [r for r in lang if r["referencedComponentId"] not in desc_active]
    lang_on_inactive_concept = [
        r
        for r in lang
        if r["referencedComponentId"] in desc_active
        and desc_concept[r["referencedComponentId"]] in inactive_c
    ]
    lang_on_tdef = [r for r in lang if r["referencedComponentId"] in snap.get("TextDefinition", {})]
    maps = act("ExtendedMap")
    by_refset: dict[str, int] = defaultdict(int)
    for r_ in lang:
        by_refset[str(r_["refsetId"])] += 1
    return {
        "concepts_total": len(concepts),
        "concepts_active": sum(r["active"] for r in concepts.values()),
        "concepts_inactive": sorted(i for i, r in concepts.items() if not r["active"]),
        "descriptions_active": len(desc),
        "descriptions_active_on_active_concepts": sum(r["conceptId"] in active_c for r in desc),
        "descriptions_dropped_inactive_concept": sum(r["conceptId"] in inactive_c for r in desc),
        "fsn_active_on_active_concepts": sum(
            r["conceptId"] in active_c and r["typeId"] == S.FSN for r in desc
        ),
        "text_definitions_active": len(tdef),
        "relationships_inferred_active": len(rels),
        "relationships_inferred_active_on_active_concepts": sum(
            r["sourceId"] in active_c and r["destinationId"] in active_c for r in rels
        ),
        "relationships_dropped_inactive_concept": sum(
            r["sourceId"] in inactive_c or r["destinationId"] in inactive_c for r in rels
        ),
        "isa_active_on_active_concepts": sum(
            r["typeId"] == S.IS_A and r["sourceId"] in active_c and r["destinationId"] in active_c
            for r in rels
        ),
        "relationships_inactive": sum(not r["active"] for r in snap.get("Relationship", {}).values()),
        "stated_relationships_active": len(act("StatedRelationship")),
        "concrete_values_active": len(act("RelationshipConcreteValues")),
        "language_rows_active": len(lang),
        "language_rows_active_by_refset": dict(sorted(by_refset.items())),
        "language_rows_on_text_definitions": len(lang_on_tdef),
        "language_rows_dropped_inactive_description": len(lang_on_inactive_desc),
        "language_rows_dropped_inactive_concept": len(lang_on_inactive_concept),
        "map_rows_active": len(maps),
        "map_rows_dropped_inactive_concept": sum(r["referencedComponentId"] in inactive_c for r in maps),
        "association_rows_active": len(act("Association")),
    }


def unescape_rule(rule: str) -> str:
    return rule.replace("&#x7C;", "|")


def static_map(snap: dict[str, dict[Any, dict[str, Any]]], refset: int) -> dict[str, Any]:
    """Static resolution of one ExtendedMap refset (docs/input-formats.md, "ICD-10 extended map")."""
    active_c = {i for i, r in snap["Concept"].items() if r["active"]}
    groups: dict[tuple[int, int], list[dict[str, Any]]] = defaultdict(list)
    for r in snap.get("ExtendedMap", {}).values():
        if r["active"] and r["refsetId"] == refset and r["referencedComponentId"] in active_c:
            groups[(r["referencedComponentId"], r["mapGroup"])].append(r)
    static: dict[str, set[int]] = defaultdict(set)
    conditional: dict[str, list[dict[str, Any]]] = defaultdict(list)
    empty_target: list[list[int]] = []
    for (cid, grp), rows in sorted(groups.items()):
        rows.sort(key=lambda x: x["mapPriority"])
        winner = next((x for x in rows if x["mapRule"] in ("TRUE", "OTHERWISE TRUE")), None)
        if winner is not None:
            if winner["mapTarget"]:
                static[winner["mapTarget"]].add(cid)
            else:
                empty_target.append([cid, grp])
        for x in rows:
            if x["mapRule"].startswith("IFA") and x["mapTarget"]:
                conditional[x["mapTarget"]].append(
                    {
                        "concept": cid,
                        "group": grp,
                        "priority": x["mapPriority"],
                        "rule": unescape_rule(x["mapRule"]),
                    }
                )
    codes = sorted(set(static) | set(conditional))
    return {
        "static": {k: sorted(static[k]) for k in sorted(static)},
        "static_dotless": {k.replace(".", ""): sorted(static[k]) for k in sorted(static)},
        "conditional": {k: conditional[k] for k in sorted(conditional)},
        "ifa_only_codes": sorted(set(conditional) - set(static)),
        "all_codes": codes,
        "all_codes_dotless": sorted(k.replace(".", "") for k in codes),
        "empty_target_groups": empty_target,
    }


def words_of(text: str) -> list[str]:
    """The description-word rule of the compiler, written out independently."""
    t = text.lower().replace("'", "").replace("\u2019", "")
    t = "".join(ch if ch.isalnum() else " " for ch in t)
    return [w for w in t.split() if w not in STOPWORDS]


def description_words(snap: dict[str, dict[Any, dict[str, Any]]], cid: int, refset: int) -> list[str]:
    """FSN without its semantic tag + synonyms preferred/acceptable in ``refset`` -> sorted word set."""
    accepted = {
        r["referencedComponentId"]
        for r in snap["Language"].values()
        if r["active"] and r["refsetId"] == refset
    }
    words: set[str] = set()
    for r in snap["Description"].values():
        if not (r["active"] and r["conceptId"] == cid):
            continue
        if r["typeId"] == S.FSN:
            term = r["term"]
            words.update(words_of(term[: term.rindex(" (")] if term.endswith(")") else term))
        elif r["typeId"] == S.SYNONYM and r["id"] in accepted:
            words.update(words_of(r["term"]))
    return sorted(words)


# ----------------------------------------------------------------------------------------------------
# Writing
# ----------------------------------------------------------------------------------------------------

_KINDS = (
    "Concept",
    "Description",
    "TextDefinition",
    "Relationship",
    "StatedRelationship",
    "RelationshipConcreteValues",
    "Language",
    "ExtendedMap",
    "Association",
)


def _sorted_rows(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return sorted(rows, key=lambda r: (r["id"], r["effectiveTime"]))


def write_package(root: Path, pkg: Package) -> list[Path]:
    written = []
    latest = max(r["effectiveTime"] for rows in pkg.full.values() for r in rows)
    snapshot = {k: list(v.values()) for k, v in pkg.current.items()}
    for kind in pkg.full:
        resolved = resolve(pkg.full[kind], latest)
        assert _sorted_rows(list(resolved.values())) == _sorted_rows(snapshot[kind]), kind
    for release, data in (("Snapshot", snapshot), ("Full", pkg.full)):
        for kind in _KINDS:
            if kind not in data:
                continue
            rows = _sorted_rows(data[kind])
            table = {col: [r[col] for r in rows] for col in S.COLUMNS[kind]}
            name = rf2_file_name(kind, release, pkg.namespace, pkg.file_date)
            path = root / pkg.name / release / rf2_folder(kind) / name
            write_rf2_file(path, kind, table)
            written.append(path)
    return written


def _check_ids(pkgs: list[Package]) -> None:
    for pkg in pkgs:
        for kind, rows in pkg.full.items():
            for col in S.SCTID_COLUMNS[kind]:
                vals = np.array([r[col] for r in rows], dtype=np.int64)
                assert verhoeff_valid(vals).all(), (pkg.name, kind, col)


def build_expected(
    intl: Package, us: Package, int_ids: dict[str, Any], us_ids: dict[str, Any]
) -> dict[str, Any]:
    int_snap = snapshot_of([intl], ET_NEW)
    int_old = snapshot_of([intl], ET_OLD)
    us_snap = snapshot_of([us], ET_US)
    combined = snapshot_of([intl, us], ET_US)
    ic = int_ids["concepts"]
    named = {
        "type_2_diabetes": ic["type_2_diabetes"],
        "sjogren": ic["sjogren"],
        "iron_deficiency_anemia": ic["iron_deficiency_anemia"],
        "crohn": ic["crohn"],
    }
    names = {**int_ids["names"], **us_ids["names"]}
    rel_old_row = intl.full["Relationship"]
    old = next(r for r in rel_old_row if r["id"] == int_ids["rel_old"])
    new = next(r for r in rel_old_row if r["id"] == int_ids["rel_new"])
    return {
        "release": {
            "root": OUT_DIR.name,
            "international_package": INT_PACKAGE,
            "us_package": US_PACKAGE,
            "international_file_date": INT_FILE_DATE,
            "us_file_date": US_FILE_DATE,
            "international_effective_times": [ET_OLD, ET_NEW],
            "us_effective_times": [ET_US],
            "stopwords": STOPWORDS,
        },
        "international": counts(int_snap),
        "international_as_of_20200131": counts(int_old),
        "us_extension": counts(us_snap, combined),
        "combined": counts(combined),
        "icd10": static_map(int_snap, S.ICD10_MAP_REFSET),
        "icd10_as_of_20200131": static_map(int_old, S.ICD10_MAP_REFSET),
        "icd10cm": static_map(combined, S.ICD10CM_MAP_REFSET),
        "history": {
            "relationship_change": {
                "source": old["sourceId"],
                "type": old["typeId"],
                "group": old["relationshipGroup"],
                "20200131": {"relationship_id": old["id"], "destination": old["destinationId"]},
                "20220131": {"relationship_id": new["id"], "destination": new["destinationId"]},
                "inactivated_relationship_id": old["id"],
            },
            "description_change": {
                "description_id": int_ids["desc_changed"],
                "concept": ic["hypertension"],
                "20200131": int_old["Description"][int_ids["desc_changed"]]["term"],
                "20220131": int_snap["Description"][int_ids["desc_changed"]]["term"],
            },
            "concept_inactivated": {
                "concept": ic["dm_without_complication"],
                "20200131": int_old["Concept"][ic["dm_without_complication"]]["active"],
                "20220131": int_snap["Concept"][ic["dm_without_complication"]]["active"],
                "replaced_by": ic["diabetes_mellitus"],
            },
            "map_row_change": {
                "member_id": int_ids["map_changed"],
                "concept": ic["kidney_disease"],
                "20200131": int_old["ExtendedMap"][int_ids["map_changed"]]["mapTarget"],
                "20220131": int_snap["ExtendedMap"][int_ids["map_changed"]]["mapTarget"],
            },
            "map_row_inactivated": {
                "member_id": int_ids["map_inactive"],
                "concept": ic["strep_pharyngitis"],
                "target": int_old["ExtendedMap"][int_ids["map_inactive"]]["mapTarget"],
            },
        },
        "description_words_us": {
            key: {"concept": cid, "fsn": names[cid], "words": description_words(combined, cid, S.US_ENGLISH)}
            for key, cid in named.items()
        },
        "description_words_gb": {
            key: {"concept": cid, "fsn": names[cid], "words": description_words(combined, cid, S.GB_ENGLISH)}
            for key, cid in named.items()
        },
        "edge_cases": {
            "concepts": {**ic, **us_ids["concepts"]},
            "inactive_concept_with_active_rows": {
                "concept": ic["dm_without_complication"],
                "active_descriptions": int_ids["dm_nc_descriptions"],
                "active_relationship": int_ids["dm_nc_isa"],
            },
            "inactive_concept_since_20200131": {
                "concept": ic["respiratory_disorder"],
                "active_descriptions": int_ids["resp_disorder_descriptions"],
                "same_as": ic["respiratory_disease"],
            },
            "inactive_relationship": int_ids["rel_old"],
            "inactive_description": int_ids["desc_inactive"],
            "inactive_language_rows_of_inactive_description": int_ids["lang_inactive_with_desc"],
            "inactive_gb_language_row_of_active_description": {
                "member_id": int_ids["gb_lang_inactive"],
                "description": int_ids["gb_lang_inactive_desc"],
            },
            "gb_only_synonym": {
                "description": int_ids["gb_only_desc"],
                "concept": ic["iron_deficiency_anemia"],
            },
            "association_replaced_by": int_ids["assoc_replaced"],
            "association_same_as": int_ids["assoc_same_as"],
            "us_escaped_pipe_map_row": us_ids["escaped_pipe_map_row"],
            "concrete_value_relationships": int_ids["concrete_value_ids"],
            "polyhierarchy": [ic["kidney_disease_due_to_t2dm"], ic["strep_pharyngitis"]],
        },
    }


def main() -> None:
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    intl, _, int_ids = build_international()
    us, _, us_ids = build_us(int_ids)
    _check_ids([intl, us])
    if OUT_DIR.exists():
        shutil.rmtree(OUT_DIR)
    files = []
    for pkg in (intl, us):
        files += write_package(OUT_DIR, pkg)
    expected = build_expected(intl, us, int_ids, us_ids)
    EXPECTED_JSON.write_text(
        json.dumps(expected, indent=1, ensure_ascii=False, sort_keys=False) + "\n", encoding="utf-8"
    )
    total = sum(p.stat().st_size for p in files)
    log.info("wrote %d files (%d bytes) under %s and %s", len(files), total, OUT_DIR, EXPECTED_JSON.name)


if __name__ == "__main__":
    main()
