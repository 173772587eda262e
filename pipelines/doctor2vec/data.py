"""Doctor2Vec data simulated from a tokenized cohort and its program (Biswal et al., AAAI 2020).

A doctor is represented by the memory of his/her patients; a clinical trial's embedding attends over that
memory to predict whether the doctor enrolls patients in it. Provider panels and enrollment records are
rarely at hand, so this module simulates them from a tokenized cohort, keeping the ground truth:

- Doctors: the specialty is an ICD chapter drawn in proportion to the patients carrying it (chapters with
  fewer than ``panel_min`` patients are skipped); the panel volume is lognormal (median ``panel_median``,
  clipped to ``[panel_min, panel_max]``); purity ~ Beta (mean ``purity_mean``): ``round(purity * volume)``
  patients carry the specialty chapter, the rest are drawn uniformly. A patient has one doctor at most.
- Trials: a seed code and its siblings (same vocabulary and 3-character ICD category). With ``criteria``
  ``category`` (the default) a patient is eligible with any code of the seed's category family (the seed
  and up to ``max_family - 1`` most frequent siblings, ``eligible_codes``), while the trial lists only the
  seed and up to ``listed_max - 1`` of them as its ``conditions``, as criteria written for a condition
  reach records coded more specifically; with ``equivalents`` (default) the codes of either ICD version
  mapped to the same SNOMED concept(s) as a family code are eligible too, as criteria written on standard
  concepts select them (OMOP cohort definitions; MIMIC-IV spans the ICD-9 to ICD-10 transition). With
  ``listed``, conditions are the seed plus up to 3 siblings
  and eligibility is exactly those. Common trials (train/val/test) seed on codes of at least
  ``common_min_patients`` patients; rare ones (test_rare) take only codes of
  ``rare_min_patients..rare_max_patients`` patients, and those codes (``held_out_codes``: every code of
  a rare trial's family) are in no other trial's conditions, family or exclusions. Exclusions, age bands
  and sex restrictions follow the grammar tables below (age and sex only when demographics exist). A code
  in one trial's family seeds no later trial; when codes run short, the splits share them in proportion.
- Pairs: ``eligible`` = a doctor's panel patients meeting the trial's criteria, ``enrolled`` ~
  Binomial(eligible, the doctor's propensity), ``label`` = enrolled >= ``min_enrolled``. A trial nobody
  is eligible for is redrawn (counted).

Patient counts per code are distinct patients over the whole cohort (all splits) of ``patients.parquet``
(``code_counts.parquet`` counts the pretraining splits' tokens only). Demographics come from the source's
``hosp/patients.csv.gz`` (MIMIC-IV) or ``patient.csv.gz`` (eICU), found through the dataset's manifest
(:func:`pipelines.doctor2vec.inputs.find_demographics`: its source folder and the file's sha256, never the
working directory); the file read is listed under the manifest's ``inputs`` and hashed into the data's
id. A source without demographics (MEDS), or ``demographics=False``, gives null age and sex; a source
whose file is missing or changed is an error, never other data under the same id.

Output format (also the reference for bringing your own data): :mod:`pipelines.doctor2vec.read`.

Dimension legend: P patients, N concepts, U distinct (patient, concept) pairs, C chapter slots (23, slot
0 = no chapter), D doctors, T trials.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from ontology_compiler.api import safe_component
from pipelines.data.dataset import Generated, dataset_for_program

from .config import D2VOptions
from .inputs import (
    CHAPTER_TITLES,
    N_CHAPTER_SLOTS,
    SEX_CODE,
    Codes,
    Cohort,
    find_demographics,
    load_cohort,
    read_codes,
)
from .read import COLUMNS, OPEN_AGE, SPLITS, D2VDataError, validate_tables

log = logging.getLogger(__name__)

GENERATOR_VERSION = "pipelines.doctor2vec_data/2"  # 2: demographics found through the dataset, hashed
AGE_BANDS = ((18, 65), (40, 80), (50, 120), (18, 50), (65, 120), (30, 75))  # inclusive
AGE_BAND_P = 0.6  # share of trials with an age band
SEX_P = {"F": 0.15, "M": 0.15}  # share of trials restricted to one sex; the rest 'any'
EXCLUDE_P, EXCLUDE_N = 0.5, (1, 2)  # share of trials with exclusions; how many codes (common, other chapter)
MAX_SIBLINGS = 3  # sibling codes added to a trial's seed code (criteria 'listed')
MAX_ATTEMPTS = 20  # seed codes tried per trial wanted
TEXT = "A study of {conditions} in {who}{age}{excluded}"
WHO = {"any": "patients", "F": "women", "M": "men"}
AGE_TEXT, AGE_OVER_TEXT, AGE_OVER = " aged {lo}-{hi}", " aged {lo} and over", 120
EXCLUDED_TEXT = "; excludes {excluded}"
WORD_RE = re.compile(r"\w+|[^\w\s]")
SPECIAL_WORDS = ("[PAD]", "[UNK]")


@dataclass
class _GeneratedWithInputs(Generated):
    """:class:`Generated` whose id also hashes the source files the generator reads beyond the dataset
    (``inputs``: role, path relative to the source folder, sha256), listed in the manifest too."""

    inputs: list[dict] = field(default_factory=list)

    @property
    def data_id(self) -> str:
        payload = {"generated": super().data_id, "inputs": self.inputs}
        return hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()[:16]

    def manifest(self, kind: str, id_key: str, **rest: Any) -> dict:
        return {**super().manifest(kind, id_key, **rest), "inputs": self.inputs}


@dataclass
class D2VResult:
    path: Path  # the data folder
    manifest: dict[str, Any]
    written: bool  # False when the identical data was already there


def _beta(rng: np.random.Generator, mean: float, concentration: float, n: int) -> np.ndarray:
    return rng.beta(mean * concentration, (1.0 - mean) * concentration, size=n)


def make_doctors(cohort: Cohort, codes: Codes, opts: D2VOptions, rng, counts: Counter) -> dict[str, Any]:
    """Specialty, panel (patient rows), purity and propensity of each doctor; owner (P,) -1 = none."""
    n_pat = len(cohort.subject_id)
    has_ch = np.zeros((n_pat, N_CHAPTER_SLOTS), bool)  # (P, C)
    concept = np.repeat(np.arange(len(codes.chapter)), cohort.n_patients_per_code)  # (U,)
    has_ch[cohort.code_patient, codes.chapter[concept]] = True
    per_ch = has_ch.sum(axis=0)  # (C,)
    per_ch[0] = 0
    per_ch[per_ch < opts.panel_min] = 0
    if per_ch.sum() == 0:
        raise D2VDataError(
            f"no ICD chapter has {opts.panel_min} patients (panel_min); the cohort is too small"
        )
    specialty = rng.choice(N_CHAPTER_SLOTS, size=opts.doctors, p=per_ch / per_ch.sum())
    volume = np.clip(
        np.rint(rng.lognormal(np.log(opts.panel_median), opts.panel_sigma, opts.doctors)),
        opts.panel_min,
        opts.panel_max,
    ).astype(int)
    purity = _beta(rng, opts.purity_mean, opts.concentration, opts.doctors)
    free = np.ones(n_pat, bool)
    panels, shares = [], []
    for s, vol, pur in zip(specialty, volume, purity, strict=True):
        pool = np.flatnonzero(has_ch[:, s] & free)
        spec = rng.choice(pool, size=min(int(round(pur * vol)), len(pool)), replace=False)
        free[spec] = False
        pool = np.flatnonzero(free)
        rest = rng.choice(pool, size=min(vol - len(spec), len(pool)), replace=False)
        free[rest] = False
        counts["panel_short"] += int(len(spec) + len(rest) < vol)
        panels.append(np.concatenate([spec, rest]))
        shares.append(len(spec) / max(len(spec) + len(rest), 1))
    keep = np.array([len(p) > 0 for p in panels])
    counts["doctor_no_patients"] += int((~keep).sum())
    panels = [p for p, k in zip(panels, keep, strict=True) if k]
    owner = np.full(n_pat, -1, np.int64)
    for d, p in enumerate(panels):
        owner[p] = d
    return {
        "specialty": specialty[keep],
        "panels": panels,
        "purity": np.array(shares)[keep],
        "owner": owner,
        "propensity": _beta(rng, opts.enroll_rate, opts.concentration, opts.doctors)[keep],
    }


class TrialMaker:
    """Draws trials seed by seed; a seed code is used once; trials nobody is eligible for are redrawn."""

    def __init__(
        self,
        cohort: Cohort,
        codes: Codes,
        owner: np.ndarray,
        exclude: np.ndarray,
        rng,
        counts: Counter,
        opts: D2VOptions,
    ):
        self.cohort, self.codes, self.owner, self.rng, self.counts = cohort, codes, owner, rng, counts
        self.opts = opts
        self.n_doctors = int(owner.max(initial=-1)) + 1
        self.exclude = exclude  # (N,) codes a trial may exclude (common ones; never rare)
        self.used = np.zeros(len(codes.special), bool)  # (N,) codes already in a trial's conditions

    def draw(self, wanted: dict[str, int], seeds: np.ndarray, siblings: np.ndarray) -> dict[str, list[dict]]:
        """Up to ``wanted[split]`` trials per split from the (N,) bool code pools ``seeds`` and ``siblings``,
        the splits interleaved in proportion so that a scarce pool is shared fairly.

        Rare trials (test_rare) draw seeds in proportion to their patient count and take the 3 most frequent
        siblings, so that enough doctors are eligible; common ones draw both uniformly (0-3 siblings)."""
        rare = "test_rare" in wanted
        schedule = [s for _, s in sorted(((i + 0.5) / n, s) for s, n in wanted.items() for i in range(n))]
        pool = np.flatnonzero(seeds & ~self.used)
        weight = self.cohort.n_patients_per_code[pool] if rare else np.ones(len(pool))
        order = iter(pool[np.argsort(-np.log(self.rng.random(len(pool))) / weight, kind="stable")].tolist())
        out: dict[str, list[dict]] = {s: [] for s in wanted}
        attempts = MAX_ATTEMPTS * len(schedule)
        for split in schedule:
            trial = None
            while trial is None and attempts > 0 and (seed := next(order, None)) is not None:
                attempts -= 1
                trial = None if self.used[seed] else self.trial(split, seed, siblings, rare)
            if trial is None:
                break  # pool or attempts exhausted
            out[split].append(trial)
        for split, n in wanted.items():
            if len(out[split]) < n:
                self.counts[f"trials_missing_{split}"] += n - len(out[split])
                log.warning(
                    "%s: only %d of %d trials could be drawn (too few usable codes)",
                    split,
                    len(out[split]),
                    n,
                )
        return out

    def trial(self, split: str, seed: int, siblings: np.ndarray, rare: bool) -> dict | None:
        """A trial seeded on ``seed``, or None (counted) when no panel patient is eligible."""
        codes, rng, opts = self.codes, self.rng, self.opts
        sib = np.flatnonzero(siblings & (codes.category == codes.category[seed]))
        sib = sib[sib != seed]
        by_count = sib[np.argsort(-self.cohort.n_patients_per_code[sib], kind="stable")]
        if opts.criteria == "category":  # eligible: the category's codes; the trial lists some of them
            family = sorted([seed, *by_count[: opts.max_family - 1].tolist()])
            others = [c for c in family if c != seed]
            if opts.equivalents:
                family = self.with_equivalents(family, siblings, rare)
                if family is None:
                    self.counts["trial_equivalent_not_rare"] += 1
                    return None
            k = min(int(rng.integers(0, opts.listed_max)), len(others))
            conditions = sorted([seed, *rng.choice(others, size=k, replace=False).tolist()]) if k else [seed]
        else:
            if rare:  # the most frequent rare siblings
                sib = by_count[:MAX_SIBLINGS]
            else:
                sib = rng.choice(
                    sib, size=min(int(rng.integers(0, MAX_SIBLINGS + 1)), len(sib)), replace=False
                )
            conditions = family = sorted([seed, *sib.tolist()])
        self.used[family] = True  # no later trial seeds on them: no two trials alike
        excluded, age, sex = self.criteria(seed)
        eligible = self.eligible(family, excluded, age, sex)
        if eligible.sum() == 0:
            self.counts["trial_no_eligible_patients"] += 1
            return None
        trial = {
            "split": split,
            "category": int(codes.chapter[seed]),
            "conditions": conditions,
            "excluded": excluded,
            "age_min": age[0],
            "age_max": age[1],
            "sex": sex,
            "eligible_codes": family,
        }
        return {**trial, "text": trial_text(trial, codes), "eligible": eligible}

    def with_equivalents(self, family: list[int], pool: np.ndarray, rare: bool) -> list[int] | None:
        """``family`` plus the codes (any ICD version) mapped to the same SNOMED concept(s) as one of its
        codes, as criteria written on standard concepts select them (OMOP cohort definitions). For a common
        trial only equivalents in ``pool`` join; a rare trial takes every equivalent and is dropped (None)
        when one of them is not rare, so that it stays a rare-disease trial."""
        key = self.codes.concept[family]
        same = np.flatnonzero(np.isin(self.codes.concept, key[key >= 0]) & ~self.used & ~self.codes.special)
        if rare:
            if (self.cohort.n_patients_per_code[same] > self.opts.rare_max_patients).any():
                return None
            return sorted(set(family) | set(same.tolist()))
        return sorted(set(family) | set(same[pool[same]].tolist()))

    def criteria(self, seed: int) -> tuple[list[int], tuple[int, int], str]:
        """Excluded codes (common, another chapter), age band and sex of a trial seeded on ``seed``."""
        rng, chapter, excluded = self.rng, self.codes.chapter, []
        if rng.random() < EXCLUDE_P:
            pool = np.flatnonzero(self.exclude & (chapter != chapter[seed]))
            size = min(int(rng.integers(EXCLUDE_N[0], EXCLUDE_N[1] + 1)), len(pool))
            excluded = sorted(rng.choice(pool, size=size, replace=False).tolist())
        age, sex = OPEN_AGE, "any"
        if self.cohort.demographics != "none":
            if rng.random() < AGE_BAND_P:
                age = AGE_BANDS[int(rng.integers(len(AGE_BANDS)))]
            u = rng.random()
            sex = "F" if u < SEX_P["F"] else "M" if u < SEX_P["F"] + SEX_P["M"] else "any"
        return excluded, age, sex

    def eligible(
        self, conditions: list[int], excluded: list[int], age: tuple[int, int], sex: str
    ) -> np.ndarray:
        """(D,) panel patients of each doctor meeting the criteria."""
        c = self.cohort
        mask = c.any_of(conditions) & ~c.any_of(excluded) & (self.owner >= 0)  # (P,)
        if age != OPEN_AGE:
            mask &= (c.age >= age[0]) & (c.age <= age[1])
        if sex != "any":
            mask &= c.sex == SEX_CODE[sex]
        return np.bincount(self.owner[mask], minlength=self.n_doctors)


def trial_text(trial: dict, codes: Codes) -> str:
    lo, hi = trial["age_min"], trial["age_max"]
    age = "" if (lo, hi) == OPEN_AGE else (AGE_OVER_TEXT if hi >= AGE_OVER else AGE_TEXT).format(lo=lo, hi=hi)
    excluded = ", ".join(dict.fromkeys(codes.title[c] for c in trial["excluded"]))
    return TEXT.format(
        conditions=", ".join(dict.fromkeys(codes.title[c] for c in trial["conditions"])),
        who=WHO[trial["sex"]],
        age=age,
        excluded=EXCLUDED_TEXT.format(excluded=excluded) if excluded else "",
    )


def make_trials(cohort: Cohort, codes: Codes, doctors: dict, opts: D2VOptions, rng, counts: Counter):
    """Trials of every split in :data:`SPLITS` order (test_rare drawn first) and the held-out codes."""
    n_pat = cohort.n_patients_per_code  # (N,)
    usable = ~codes.special & (codes.chapter > 0)
    rare = usable & (n_pat >= opts.rare_min_patients) & (n_pat <= opts.rare_max_patients)
    common = usable & (n_pat >= opts.common_min_patients)  # disjoint from rare (options checked)
    maker = TrialMaker(cohort, codes, doctors["owner"], common, rng, counts, opts)
    drawn = maker.draw({"test_rare": opts.rare_trials}, rare, rare)
    held = np.zeros(len(usable), bool)
    for t in drawn["test_rare"]:
        held[t["eligible_codes"]] = True
    siblings = usable & (n_pat >= 1) & ~held
    wanted = {"train": opts.train_trials, "val": opts.val_trials, "test": opts.test_trials}
    drawn.update(maker.draw(wanted, common, siblings))
    return [t for split in SPLITS for t in drawn[split]], sorted(int(c) for c in np.flatnonzero(held))


def _table(name: str, data: dict[str, Any]) -> pa.Table:
    """``data`` as table ``name`` of the format, typed by :data:`pipelines.doctor2vec.read.COLUMNS`."""
    return pa.Table.from_pydict(data, schema=pa.schema([(c, COLUMNS[name][c][0]) for c in data]))


def build_tables(cohort: Cohort, codes: Codes, opts: D2VOptions) -> tuple[dict[str, pa.Table], dict]:
    """The five tables and the manifest's counts, vocabulary fingerprint and held-out codes."""
    rng = np.random.default_rng(opts.seed)
    counts: Counter = Counter()
    doctors = make_doctors(cohort, codes, opts, rng, counts)
    trials, held = make_trials(cohort, codes, doctors, opts, rng, counts)
    n_doc, n_trial = len(doctors["panels"]), len(trials)
    eligible = np.stack([t.pop("eligible") for t in trials], 1) if trials else np.zeros((n_doc, 0), int)
    enrolled = rng.binomial(eligible, doctors["propensity"][:, None])  # (D, T)
    tokens = [WORD_RE.findall(t["text"].lower()) for t in trials]
    words = list(SPECIAL_WORDS) + sorted({w for ws in tokens for w in ws} - set(SPECIAL_WORDS))
    word_id = {w: i for i, w in enumerate(words)}
    train_words = {w for ws, t in zip(tokens, trials, strict=True) if t["split"] == "train" for w in ws}
    rows = np.flatnonzero(doctors["owner"] >= 0)
    rows = rows[np.argsort(cohort.subject_id[rows], kind="stable")]
    starts = np.concatenate([[0], np.cumsum(cohort.lengths)])
    split = np.array([t["split"] for t in trials], dtype=object)  # (T,)
    tables = {
        "patients": _table(
            "patients",
            {
                "subject_id": cohort.subject_id[rows],
                "sex": [{1: "F", 2: "M"}.get(int(s)) for s in cohort.sex[rows]],
                "age": [int(a) if a >= 0 else None for a in cohort.age[rows]],
                "input_ids": [cohort.input_ids[starts[r] : starts[r + 1]] for r in rows],
                "segment_ids": [cohort.segment_ids[starts[r] : starts[r + 1]] for r in rows],
            },
        ),
        "doctors": _table(
            "doctors",
            {
                "doctor_id": np.arange(n_doc),
                "specialty": doctors["specialty"],
                "specialty_title": [CHAPTER_TITLES[int(s)] for s in doctors["specialty"]],
                "volume": [len(p) for p in doctors["panels"]],
                "purity": doctors["purity"],
                "propensity": doctors["propensity"],
                "panel": [np.sort(cohort.subject_id[p]) for p in doctors["panels"]],
            },
        ),
        "trials": pa.Table.from_pylist(
            [
                {"trial_id": i, **t, "rare": t["split"] == "test_rare", "text_ids": [word_id[w] for w in ws]}
                for i, (t, ws) in enumerate(zip(trials, tokens, strict=True))
            ],
            schema=pa.schema([(c, typ) for c, (typ, _) in COLUMNS["trials"].items()]),
        ),
        "pairs": _table(
            "pairs",
            {
                "doctor_id": np.repeat(np.arange(n_doc), n_trial),
                "trial_id": np.tile(np.arange(n_trial), n_doc),
                "split": np.tile(split, n_doc),
                "eligible": eligible.ravel(),
                "enrolled": enrolled.ravel(),
                "label": enrolled.ravel() >= opts.min_enrolled,
            },
        ),
        "vocab": _table(
            "vocab",
            {
                "token_id": np.arange(len(words)),
                "token": words,
                "in_train": [w in train_words for w in words],
            },
        ),
    }
    label = (enrolled >= opts.min_enrolled).mean(axis=0) if n_doc else np.zeros(n_trial)  # (T,)
    counts_out = {
        "doctors": n_doc,
        "patients": len(rows),
        "trials": {s: int((split == s).sum()) for s in SPLITS},
        "pairs": {s: int((split == s).sum()) * n_doc for s in SPLITS},
        "positive_rate": {s: round(float(label[split == s].mean()), 4) for s in SPLITS if (split == s).any()},
        "skipped": dict(sorted((k, int(v)) for k, v in counts.items() if v)),
    }
    fingerprint = hashlib.sha256(json.dumps(words).encode()).hexdigest()[:16]
    info = {
        "n_words": len(words),
        "vocab_fingerprint": fingerprint,
        "demographics": cohort.demographics,
        "held_out_codes": held,
        "counts": counts_out,
    }
    return tables, info


def generate_doctor2vec(
    dataset: str | Path,
    program: str | Path,
    *,
    out: str | Path = "artifacts/doctor2vec",
    name: str | None = None,
    options: D2VOptions | None = None,
) -> D2VResult:
    """Simulate Doctor2Vec data from a tokenized ``dataset`` and the ``program`` it was tokenized with."""
    opts = options or D2VOptions()
    if name is not None:
        safe_component(name, "name")  # one folder under ``out``, never a path
    dpath, ppath = Path(dataset), Path(program)
    dman, program_id = dataset_for_program(dpath, ppath, D2VDataError)
    demographics = find_demographics(dpath, dman, opts.demographics)  # through the manifest, never the cwd
    name = name or f"d2v-{Path(os.path.abspath(dpath)).parent.name}"  # the dataset's name, from any folder
    inputs = [demographics.record()] if demographics else []
    gen = _GeneratedWithInputs(GENERATOR_VERSION, program_id, dman, asdict(opts), Path(out) / name, inputs)
    manifest = gen.existing()
    if manifest is not None:
        return D2VResult(gen.path, manifest, False)
    codes = read_codes(ppath)
    counts: Counter = Counter()
    cohort = load_cohort(dpath, demographics, codes, counts)
    tables, info = build_tables(cohort, codes, opts)
    info["counts"]["skipped"] = dict(sorted((Counter(info["counts"]["skipped"]) + counts).items()))
    if tables["pairs"].num_rows == 0:
        raise D2VDataError(f"{dpath}: no (doctor, trial) pair could be generated ({info['counts']})")
    manifest = gen.manifest(
        "doctor2vec",
        "d2v_id",
        n_codes=len(codes.special),
        special_ids=np.flatnonzero(codes.special).tolist(),
        rare_max_patients=opts.rare_max_patients,
        **info,
    )
    validate_tables(manifest, tables, gen.path)  # the generator's output meets the reader's contract
    for k, v in info["counts"]["skipped"].items():
        log.warning("%s: %d %s", dpath, v, k.replace("_", " "))
    log.info("%s: positive rate per split %s", dpath, info["counts"]["positive_rate"])
    return D2VResult(gen.path, *gen.write(tables, manifest))


def describe(result: D2VResult) -> str:
    """What ``hrrbert doctor2vec generate`` prints: folder, doctors, trials, positive rates, skips."""
    c = result.manifest.get("counts", {})
    lines = [
        f"data      {result.path}{'' if result.written else ' (already generated)'}",
        f"doctors   {c.get('doctors', 0):,} ({c.get('patients', 0):,} patients in panels)",
        "trials    " + ", ".join(f"{k} {v}" for k, v in c.get("trials", {}).items()),
        "positives " + ", ".join(f"{k} {100 * v:.1f} %" for k, v in c.get("positive_rate", {}).items()),
    ]
    skipped = {k: v for k, v in c.get("skipped", {}).items() if v}
    if skipped:
        lines.append("skipped   " + ", ".join(f"{k.replace('_', ' ')} {v}" for k, v in skipped.items()))
    return "\n".join(lines)
