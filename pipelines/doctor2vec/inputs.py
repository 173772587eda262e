"""What the Doctor2Vec generator reads: the program's codes (titles, ICD-10 chapters, 3-character
categories, specials) and the tokenized cohort with its demographics, as arrays.

The demographics file is found through the dataset's manifest (:func:`find_demographics`): its source
folder and the file's sha256 as the dataset recorded them, never the working directory, so the same
command gives the same data from any folder, and the file's hash is part of the data's id.

ICD-9-CM codes carry ICD-9 chapter numbers in the program; specialties and trial categories use the
ICD-10 chapters, so ICD-9 chapters are mapped (:data:`ICD9_TO_ICD10_CHAPTER`, eye and ear split out of
ICD-9's nervous-system chapter by category range).

Dimension legend: P patients, N concepts, U distinct (patient, concept) pairs.
"""

from __future__ import annotations

import logging
import os
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow.compute as pc
import pyarrow.parquet as pq

from ontology_compiler.api import ICD9CM, ICD10CM, dotted_code, sha256_file
from pipelines.errors import InputFileError

from .read import DEMOGRAPHICS, D2VDataError, read_demographics

log = logging.getLogger(__name__)

CHAPTER_TITLES: dict[int, str] = {
    1: "Certain infectious and parasitic diseases",
    2: "Neoplasms",
    3: "Diseases of the blood and blood-forming organs and certain disorders involving the immune mechanism",
    4: "Endocrine, nutritional and metabolic diseases",
    5: "Mental, behavioral and neurodevelopmental disorders",
    6: "Diseases of the nervous system",
    7: "Diseases of the eye and adnexa",
    8: "Diseases of the ear and mastoid process",
    9: "Diseases of the circulatory system",
    10: "Diseases of the respiratory system",
    11: "Diseases of the digestive system",
    12: "Diseases of the skin and subcutaneous tissue",
    13: "Diseases of the musculoskeletal system and connective tissue",
    14: "Diseases of the genitourinary system",
    15: "Pregnancy, childbirth and the puerperium",
    16: "Certain conditions originating in the perinatal period",
    17: "Congenital malformations, deformations and chromosomal abnormalities",
    18: "Symptoms, signs and abnormal clinical and laboratory findings, not elsewhere classified",
    19: "Injury, poisoning and certain other consequences of external causes",
    20: "External causes of morbidity",
    21: "Factors influencing health status and contact with health services",
    22: "Codes for special purposes",
}
N_CHAPTER_SLOTS = 23  # chapters 1..22, slot 0 = none
# ICD-9-CM chapter (concepts.chapter of an ICD9CM code) -> the ICD-10 chapter used for specialties and trials
ICD9_TO_ICD10_CHAPTER = {1: 1, 2: 2, 3: 4, 4: 3, 5: 5, 6: 6, 7: 9, 8: 10, 9: 11, 10: 14,
                         11: 15, 12: 12, 13: 13, 14: 17, 15: 16, 16: 18, 17: 19, 18: 21, 19: 20}  # fmt: skip
ICD9_CATEGORY_CHAPTER = ((360, 379, 7), (380, 389, 8))  # ICD-9 chapter 6 also holds the eye and the ear
NO_EQUIVALENCE = ("fallback", "special")  # mapping kinds that say nothing about a code's own concept
SEX_CODE = {"F": 1, "M": 2}  # 0 = unknown


@dataclass
class Cohort:
    """Patients (specials removed) with demographics and the patient-by-code index."""

    subject_id: np.ndarray  # (P,) int64
    lengths: np.ndarray  # (P,) codes per patient
    input_ids: np.ndarray  # (sum lengths,) int32
    segment_ids: np.ndarray  # (sum lengths,) int32
    sex: np.ndarray  # (P,) int8: 0 unknown, 1 F, 2 M
    age: np.ndarray  # (P,) int32, -1 unknown
    demographics: str  # 'mimic-iv' | 'eicu' | 'none'
    code_patient: np.ndarray  # (U,) patient row of each distinct (patient, concept), sorted by concept
    code_start: np.ndarray  # (N+1,) concept c's patients are code_patient[code_start[c]:code_start[c+1]]

    @property
    def n_patients_per_code(self) -> np.ndarray:
        return np.diff(self.code_start)  # (N,)

    def any_of(self, codes: list[int]) -> np.ndarray:
        """(P,) bool: the patient has at least one of ``codes``."""
        mask = np.zeros(len(self.subject_id), bool)
        for c in codes:
            mask[self.code_patient[self.code_start[c] : self.code_start[c + 1]]] = True
        return mask


@dataclass
class Codes:
    """What the generator needs from the program's concepts."""

    title: list[str]  # (N,) title, or the dotted code when untitled
    chapter: np.ndarray  # (N,) int8, 0 = none
    category: np.ndarray  # (N,) int64 id of (vocabulary, first 3 characters of code); -1 special
    special: np.ndarray  # (N,) bool
    concept: (
        np.ndarray
    )  # (N,) int64 id of the code's set of SNOMED concepts; -1: none, special or a fallback map


def _category(vocabulary: str, code: str) -> str:
    """An ICD code's category: its characters before the dot (E800 for the ICD-9 E code E8000); other
    codes (special tokens) by their first 3 characters."""
    if vocabulary not in (ICD9CM, ICD10CM):
        return code[:3]
    return dotted_code(code, vocabulary).split(".")[0]


def read_codes(program: Path) -> Codes:
    """Titles, ICD-10 chapters, 3-character categories and special tokens of the program's concepts."""
    f = program / "concepts.parquet"
    if not f.is_file():
        raise InputFileError(f, "missing; Doctor2Vec generation needs the program's concepts table")
    cols = [
        "concept_id",
        "vocabulary",
        "code",
        "code_dotted",
        "title",
        "chapter",
        "snomed_ids",
        "mapping_kind",
    ]
    c = pq.read_table(f, columns=cols)
    c = c.sort_by("concept_id").to_pydict()
    if c["concept_id"] != list(range(len(c["concept_id"]))):
        raise InputFileError(f, "concept ids are not 0..N-1", hint="recompile the program")
    special = np.array([code.startswith("[") for code in c["code"]])
    keys = [f"{v}:{_category(v, code)}" for v, code in zip(c["vocabulary"], c["code"], strict=True)]
    category = np.unique(keys, return_inverse=True)[1].astype(np.int64)
    category[special] = -1
    chapter = np.array([ch if ch and ch < N_CHAPTER_SLOTS else 0 for ch in c["chapter"]], np.int8)
    for i in np.flatnonzero(np.array(c["vocabulary"], dtype=object) == ICD9CM):
        head = int(c["code"][i][:3]) if c["code"][i][:3].isdigit() else -1
        default = ICD9_TO_ICD10_CHAPTER.get(int(chapter[i]), 0)
        chapter[i] = next((ch for lo, hi, ch in ICD9_CATEGORY_CHAPTER if lo <= head <= hi), default)
    title = [t or d for t, d in zip(c["title"], c["code_dotted"], strict=True)]
    mapped = [
        tuple(sorted(ids)) if ids and kind not in NO_EQUIVALENCE else ()
        for ids, kind in zip(c["snomed_ids"], c["mapping_kind"], strict=True)
    ]
    concept = np.unique([repr(m) for m in mapped], return_inverse=True)[1].astype(np.int64)
    concept[np.array([not m for m in mapped]) | special] = -1
    return Codes(title, chapter, category, special, concept)


@dataclass
class DemographicsInput:
    """The source file age and sex are read from, as the dataset's manifest names it."""

    reader: str  # the dataset's source reader: 'mimic-iv' | 'eicu'
    path: str  # relative to the source folder, as in the dataset's source.inputs
    sha256: str  # of the file read (the one the dataset lists, when it lists it)
    file: Path  # where it was found (not part of the data's id: the same file anywhere is the same input)

    def record(self) -> dict[str, str]:
        """What the data's manifest lists under ``inputs`` and its id hashes."""
        return {"role": "demographics", "reader": self.reader, "path": self.path, "sha256": self.sha256}


def _source_roots(dataset: Path, path: str) -> list[Path]:
    """Where the source folder ``path`` of the dataset's manifest may be: itself when absolute; when
    relative (prepared from another working directory), under each folder holding the dataset."""
    if Path(path).is_absolute():
        return [Path(path)]
    here = Path(os.path.abspath(dataset))
    return [folder / path for folder in here.parents]


def find_demographics(
    dataset: Path, manifest: dict[str, Any], wanted: bool = True
) -> DemographicsInput | None:
    """The demographics file of the dataset's source, located through the dataset's ``manifest`` alone.

    None when not ``wanted`` or when the source's reader has none (MEDS: age and sex unknown, the same
    from anywhere). The file is ``source.path`` + the reader's file (:data:`DEMOGRAPHICS`); a relative
    ``source.path`` is tried under each folder that holds the dataset, never the working directory. When
    the manifest lists the file in ``source.inputs`` it must have that sha256 (the dataset's id hashed
    it); a file that cannot be found, or that changed, is an error rather than data without age and sex
    under the same name.
    """
    if not wanted:
        log.info("%s: demographics not read (--no-demographics): age and sex unknown", dataset)
        return None
    source = manifest.get("source") or {}
    reader, path = source.get("reader"), source.get("path")
    if reader not in DEMOGRAPHICS:
        log.warning(
            "%s: source reader %r has no demographics: age and sex unknown, trials unrestricted",
            dataset,
            reader,
        )
        return None
    rel = DEMOGRAPHICS[reader][0]
    names = (rel, rel.removesuffix(".gz"))
    listed = {i.get("path"): i.get("sha256") for i in source.get("inputs") or [] if i.get("path") in names}
    where = dataset / "manifest.json"
    hint = (
        "generate with --no-demographics for data without age and sex (a different data id), or prepare "
        "the dataset again from the source where it is now"
    )
    if not path:
        raise D2VDataError(f"{where}: the source ({reader}) has no 'path'; {hint}")
    tried, changed = [], []
    for root in _source_roots(dataset, str(path)):
        for name in names:
            f = root / name
            if listed and name not in listed:  # the dataset read the other spelling
                continue
            tried.append(str(f))
            if not f.is_file():
                continue
            got = sha256_file(f)
            want = listed.get(name)
            if want is not None and got != want:
                changed.append(f"{f}: sha256 {got[:12]}..., the dataset lists {want[:12]}...")
                continue
            if not listed:
                log.warning(
                    "%s: the dataset does not list %s among its inputs; using %s (sha256 %s...)",
                    where,
                    name,
                    f,
                    got[:12],
                )
            return DemographicsInput(reader, name, got, f)
    if changed:
        raise D2VDataError(
            f"{where}: the source's {rel} changed since the dataset was prepared:\n  "
            + "\n  ".join(changed)
            + f"\n  {hint}"
        )
    raise D2VDataError(
        f"{where}: the source's demographics ({reader}: {rel} under {path!r}) were not found; looked for:\n  "
        + "\n  ".join(tried[:4])
        + (f"\n  ... and {len(tried) - 4} more" if len(tried) > 4 else "")
        + f"\n  {hint}"
    )


def load_cohort(dpath: Path, demographics: DemographicsInput | None, codes: Codes, counts: Counter) -> Cohort:
    """Every patient of the tokenized dataset (all splits), special tokens removed, with the demographics
    of :func:`find_demographics` (None: age and sex unknown)."""
    f = dpath / "patients.parquet"
    if not f.is_file():
        raise InputFileError(f, "missing; not a tokenized dataset folder")
    t = pq.read_table(f, columns=["subject_id", "input_ids", "segment_ids"])
    if t.num_rows == 0:
        raise D2VDataError(f"{f}: no patients; Doctor2Vec data needs a cohort to draw panels from")
    subject = t.column("subject_id").to_numpy()
    ids_col, seg_col = t.column("input_ids").combine_chunks(), t.column("segment_ids").combine_chunks()
    ids = ids_col.flatten().to_numpy().astype(np.int32)
    seg = seg_col.flatten().to_numpy().astype(np.int32)
    row = np.repeat(np.arange(len(subject)), pc.list_value_length(ids_col).fill_null(0).to_numpy())
    inside = (ids >= 0) & (ids < len(codes.special))
    counts["codes_outside_program"] += int((~inside).sum())
    keep = inside.copy()
    keep[inside] = ~codes.special[ids[inside]]
    ids, seg, row = ids[keep], seg[keep], row[keep]
    key = np.unique(ids.astype(np.int64) * len(subject) + row)  # (U,) sorted by concept, then patient
    sex, age = np.zeros(len(subject), np.int8), np.full(len(subject), -1, np.int32)
    demo = None if demographics is None else read_demographics(demographics.file, demographics.reader)
    kind = "none" if demographics is None else demographics.reader
    if demo is not None:
        known = demo.column("subject_id").to_numpy()
        pos = np.clip(np.searchsorted(known, subject), 0, max(len(known) - 1, 0))
        found = known[pos] == subject if len(known) else np.zeros(len(subject), bool)
        counts["patients_without_demographics"] += int((~found).sum())
        d_sex = np.array([SEX_CODE.get(s, 0) for s in demo.column("sex").to_pylist()], np.int8)
        d_age = demo.column("age").fill_null(-1).to_numpy().astype(np.int32)
        sex[found], age[found] = d_sex[pos[found]], d_age[pos[found]]
    return Cohort(
        subject,
        np.bincount(row, minlength=len(subject)),
        ids,
        seg,
        sex,
        age,
        kind,
        code_patient=key % len(subject),
        code_start=np.searchsorted(key // len(subject), np.arange(len(codes.special) + 1)),
    )
