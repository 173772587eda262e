"""Write tests/data/mapping_sources/: NLM, OMOP and GEM files plus a code universe, in the real layouts.

They map ICD codes onto the concepts of the RF2 fixture ``snomed_mini_20220531`` (synthetic ids; see
README.md) and exercise every branch of the mapping policy. Deterministic; run from the repo root:

    .venv/bin/python tests/data/make_mapping_fixture.py

Layouts (docs/input-formats.md): NLM ``ICD9CM_SNOMED_MAP_1TO1/1TOM_201812.txt`` TAB-separated with a UTF-8 BOM
and ``NULL``; OMOP ``CONCEPT.csv``/``CONCEPT_RELATIONSHIP.csv`` TAB-separated, unquoted; CMS GEMs in the
19-character fixed-width layout; ``d_icd_diagnoses.csv`` as MIMIC-IV writes it; ``code_counts.csv``.
"""

from __future__ import annotations

import csv
import io
from pathlib import Path

OUT = Path(__file__).resolve().parent / "mapping_sources"

# fixture concepts (tests/data/README.md)
T2DM, DM, KIDNEY, KIDNEY_T2DM = 9990104001, 9990103007, 9990105000, 9990106004
ASTHMA, APPENDICITIS, HYPERTENSION, MENIERE = 9990108003, 9990110001, 9990112009, 9990113004
CROHN, STREP, PHARYNGITIS, OSTEOPOROSIS, IDA = 9990121005, 9990117003, 9990116007, 9990118008, 9990120006
DM_INACTIVE, RESP_INACTIVE = 9990122003, 9990123008  # REPLACED BY DM, SAME AS 9990107008
UNKNOWN = 9998888004  # Verhoeff-valid, not in the release

NLM_HEADER = ["ICD_CODE", "ICD_NAME", "IS_CURRENT_ICD", "IP_USAGE", "OP_USAGE", "AVG_USAGE", "IS_NEC",
              "SNOMED_CID", "SNOMED_FSN", "IS_1-1MAP", "CORE_USAGE", "IN_CORE"]  # fmt: skip
NLM_1TO1 = [  # code, name, sctid, fsn
    (
        "250.00",
        "Diabetes mellitus without mention of complication, type II",
        T2DM,
        "Type 2 diabetes mellitus (disorder)",
    ),
    ("401.9", "Unspecified essential hypertension", HYPERTENSION, "Hypertensive disorder (disorder)"),
    ("493.90", "Asthma, unspecified type, unspecified", ASTHMA, "Asthma (disorder)"),
    ("540.9", "Acute appendicitis without mention of peritonitis", APPENDICITIS, "Appendicitis (disorder)"),
    ("386.00", "Meniere's disease, unspecified", MENIERE, "Ménière disease (disorder)"),
    (
        "250.01",
        "Diabetes mellitus without mention of complication, type I",
        DM_INACTIVE,
        "Diabetes without complication",
    ),
    ("519.9", "Unspecified disease of respiratory system", RESP_INACTIVE, "Respiratory disorder"),
    ("799.9", "Other unknown and unspecified cause of morbidity", UNKNOWN, "Not in this release"),
    ("401.9", "Unspecified essential hypertension", KIDNEY, "A conflicting second row"),  # conflict
]
NLM_1TOM = [
    ("585.9", "Chronic kidney disease, unspecified", KIDNEY, "Kidney disease (disorder)"),
    (
        "585.9",
        "Chronic kidney disease, unspecified",
        KIDNEY_T2DM,
        "Kidney disease due to type 2 diabetes (disorder)",
    ),
    ("733.00", "Osteoporosis, unspecified", OSTEOPOROSIS, "Osteoporosis (disorder)"),
    ("733.01", "Senile osteoporosis", None, "NULL"),
]

# OMOP: (concept_id, name, vocabulary, class, standard, code, invalid_reason)
OMOP_CONCEPTS = [
    (
        45500001,
        "Crohn's disease, unspecified, without complications",
        "ICD10CM",
        "5-char billing code",
        "",
        "K50.90",
        "",
    ),
    (45500002, "Iron deficiency anemia, unspecified", "ICD10CM", "4-char billing code", "", "D50.9", ""),
    (
        45500003,
        "Acute recurrent streptococcal pharyngitis",
        "ICD10CM",
        "4-char billing code",
        "",
        "J02.0",
        "",
    ),
    (44800001, "Iron deficiency anemia, unspecified", "ICD9CM", "4-dig billing code", "", "280.9", ""),
    (44800002, "Streptococcal sore throat", "ICD9CM", "4-dig billing code", "", "034.0", ""),
    (44800003, 'Osteoporosis, "senile"', "ICD9CM", "5-dig billing code", "", "733.01", ""),
    (201001, "Crohn's disease", "SNOMED", "Disorder", "S", str(CROHN), ""),
    (201002, "Iron deficiency anemia", "SNOMED", "Disorder", "S", str(IDA), ""),
    (201003, "Pharyngitis", "SNOMED", "Disorder", "S", str(PHARYNGITIS), ""),
    (201004, "Streptococcal pharyngitis", "SNOMED", "Disorder", "S", str(STREP), ""),
    (201005, "Osteoporosis", "SNOMED", "Disorder", "S", str(OSTEOPOROSIS), ""),
    (19000001, "Some drug", "RxNorm", "Clinical Drug", "S", "123456", ""),
]
OMOP_RELS = [  # c1, c2, relationship, invalid_reason
    (45500001, 201001, "Maps to", ""),
    (45500002, 201002, "Maps to", ""),
    (45500003, 201003, "Maps to", ""),  # the SNOMED map says STREP: the policy decides
    (44800001, 201002, "Maps to", ""),
    (44800002, 201004, "Maps to", ""),
    (44800003, 201005, "Maps to", "D"),  # deleted: not used
    (44800003, 19000001, "Maps to", ""),  # not a SNOMED target: counted
    (201001, 45500001, "Mapped from", ""),
]

# GEMs (2018 fixed width): backward source(8)+target(6)+flags(5); forward source(6)+target(8)+flags(5)
GEM_BACKWARD = [
    ("K3580", "5409", "10000"),  # chain: ICD-10 -> 540.9 -> appendicitis
    ("E1121", "25000", "10111"),  # combination scenario 1: one code of each choice list
    ("E1121", "5859", "10112"),
    ("R6889", "NoDx", "11000"),  # no map
    ("I10", "4019", "00000"),
]
GEM_FORWARD = [
    ("49391", "J459", "10000"),  # chain: ICD-9 -> J45.9 -> two asthma concepts
    ("7999", "R69", "10000"),
]

# The code universe, in MIMIC-IV d_icd_diagnoses layout: icd_code,icd_version,long_title
CODES = [
    ("E119", 10, "Type 2 diabetes mellitus without complications"),
    ("I10", 10, "Essential (primary) hypertension"),
    ("J459", 10, "Other and unspecified asthma"),
    ("J020", 10, "Streptococcal pharyngitis"),
    ("K509", 10, "Crohn's disease, unspecified"),
    ("K5090", 10, "Crohn's disease, unspecified, without complications"),
    ("D509", 10, "Iron deficiency anemia, unspecified"),
    ("K3580", 10, "Unspecified acute appendicitis"),
    ("E1121", 10, "Type 2 diabetes mellitus with diabetic nephropathy"),
    ("K3589", 10, "Other acute appendicitis without perforation or gangrene"),
    ("R6889", 10, "Other general symptoms and signs"),
    ("M810", 10, "Age-related osteoporosis without current pathological fracture"),
    ("U099", 10, ""),  # no title, no mapped ancestor: unmapped even with the fallback
    ("25000", 9, "Diabetes mellitus without mention of complication, type II or unspecified type"),
    ("4019", 9, "Unspecified essential hypertension"),
    ("49390", 9, "Asthma, unspecified type, unspecified"),
    ("49391", 9, "Asthma, unspecified type, with status asthmaticus"),
    ("5409", 9, "Acute appendicitis without mention of peritonitis"),
    ("25001", 9, "Diabetes mellitus without mention of complication, type I"),
    ("5199", 9, "Unspecified disease of respiratory system"),
    ("5859", 9, "Chronic kidney disease, unspecified"),
    ("2809", 9, "Iron deficiency anemia, unspecified"),
    ("0340", 9, "Streptococcal sore throat"),
    ("7999", 9, "Other unknown and unspecified cause of morbidity or mortality"),
    ("40191", 9, "Essential hypertension, a made-up fifth-digit child"),
]
COUNTS = {("10", "E119"): 5000, ("10", "I10"): 8000, ("10", "J459"): 1500, ("10", "K3580"): 300,
          ("10", "U099"): 20, ("10", "R6889"): 70, ("9", "4019"): 9000, ("9", "25000"): 4000,
          ("9", "7999"): 40, ("9", "V7281"): 10}  # fmt: skip


def write_tsv(
    path: Path, header: list[str], rows: list[list[str]], bom: bool = False, crlf: bool = False
) -> None:
    eol = "\r\n" if crlf else "\n"
    text = "\t".join(header) + eol + "".join("\t".join(map(str, r)) + eol for r in rows)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes((b"\xef\xbb\xbf" if bom else b"") + text.encode("utf-8"))


def main() -> None:
    def nlm_rows(rows, one):
        return [
            [
                c,
                n,
                "1",
                "0.5" if s else "NULL",
                "NULL",
                "0.25" if s else "NULL",
                "0",
                s if s else "NULL",
                f,
                "1" if one else "0",
                "NULL",
                "0",
            ]
            for c, n, s, f in rows
        ]

    write_tsv(
        OUT / "nlm" / "ICD9CM_SNOMED_MAP_1TO1_201812.txt",
        NLM_HEADER,
        nlm_rows(NLM_1TO1, True),
        bom=True,
        crlf=True,
    )
    write_tsv(
        OUT / "nlm" / "ICD9CM_SNOMED_MAP_1TOM_201812.txt",
        NLM_HEADER,
        nlm_rows(NLM_1TOM, False),
        bom=True,
        crlf=True,
    )
    write_tsv(
        OUT / "omop" / "CONCEPT.csv",
        [
            "concept_id",
            "concept_name",
            "domain_id",
            "vocabulary_id",
            "concept_class_id",
            "standard_concept",
            "concept_code",
            "valid_start_date",
            "valid_end_date",
            "invalid_reason",
        ],
        [[i, n, "Condition", v, k, s, c, "20161001", "20991231", r] for i, n, v, k, s, c, r in OMOP_CONCEPTS],
    )
    write_tsv(
        OUT / "omop" / "CONCEPT_RELATIONSHIP.csv",
        [
            "concept_id_1",
            "concept_id_2",
            "relationship_id",
            "valid_start_date",
            "valid_end_date",
            "invalid_reason",
        ],
        [[a, b, r, "20161001", "20991231" if not inv else "20200101", inv] for a, b, r, inv in OMOP_RELS],
    )
    (OUT / "gem").mkdir(parents=True, exist_ok=True)
    (OUT / "gem" / "2018_I10gem.txt").write_text(
        "".join(f"{s:<8}{t:<6}{f}\n" for s, t, f in GEM_BACKWARD), "ascii"
    )
    (OUT / "gem" / "2018_I9gem.txt").write_text(
        "".join(f"{s:<6}{t:<8}{f}\n" for s, t, f in GEM_FORWARD), "ascii"
    )
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(["icd_code", "icd_version", "long_title"])
    w.writerows(CODES)
    (OUT / "d_icd_diagnoses.csv").write_text(buf.getvalue(), "utf-8")
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(["icd_version", "icd_code", "count"])
    w.writerows([(v, c, n) for (v, c), n in COUNTS.items()])
    (OUT / "code_counts.csv").write_text(buf.getvalue(), "utf-8")


if __name__ == "__main__":
    main()
