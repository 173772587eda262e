"""Synthetic cohort with known ground truth, written in the exact MIMIC-IV and eICU layouts.

    generate_cohort("artifacts/ehr/demo", seed=0)   # DEMO_PATIENTS patients

writes ``hosp/{patients,admissions,diagnoses_icd,d_icd_diagnoses}.csv.gz`` (MIMIC-IV v2 hosp module),
``eicu/{patient,diagnosis}.csv.gz`` (eICU-CRD v2.0, a second hospital with an intensive-care case mix)
and ``ground_truth/*.parquet`` (latent conditions, mortality probabilities, the condition behind every
code); then, for other MIMIC-IV tools (PyHealth's loader reads ``icu/icustays`` always), the tables
hrrbert itself does not read: ``icu/icustays``, ``hosp/{procedures_icd,d_icd_procedures,prescriptions}``
(MIMIC-IV v2.2 layouts), drawn inside the admissions from their own random stream
(:data:`EXTRA_TABLES_STREAM`) after everything else, so that the files above do not depend on them.
Patients carry latent conditions (ICD-10-CM categories, see ``cohort_space``); each visit emits codes
below its active conditions; visits before 2115-10-01 (shifted time; 2015-10-01 real) are coded in
ICD-9-CM through the GEM. Death within 182 days of the last discharge is drawn from condition severities
and age, and written to ``dod`` (and ``deathtime`` for in-hospital deaths); ``dod`` is censored one year
after the last discharge. Every per-row step is vectorised numpy; strings are formatted by DuckDB.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path

import duckdb
import numpy as np
import pyarrow.parquet as pq

from .cohort_space import CodeSpace, build_code_space
from .cohort_write import Hospital, write_eicu, write_ground_truth, write_mimic, write_mimic_extra
from .defaults import DEMO_PATIENTS

log = logging.getLogger(__name__)

DAY = 86400
SWITCH = int(np.datetime64("2115-10-01T00:00:00", "s").astype(np.int64))  # ICD-9 -> ICD-10, shifted
START = int(np.datetime64("2108-01-01T00:00:00", "s").astype(np.int64))  # first admissions (2008 real)
SPAN_YEARS = 14.5  # first admissions spread over 2108-2122
# the extra MIMIC-IV tables draw from default_rng([seed, EXTRA_TABLES_STREAM]), never from the main stream
EXTRA_TABLES_STREAM = 220


def _groups(counts: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """For group sizes ``counts``: (owner of each element, position within its group, group offsets)."""
    offsets = np.concatenate([[0], np.cumsum(counts)])
    owner = np.repeat(np.arange(len(counts)), counts)
    local = np.arange(offsets[-1]) - offsets[owner]
    return owner, local, offsets


def _calibrate(logit: np.ndarray, target: float) -> float:
    """Intercept b with mean(sigmoid(logit + b)) == target (bisection)."""
    lo, hi = -20.0, 20.0
    for _ in range(50):
        mid = (lo + hi) / 2
        if np.mean(1 / (1 + np.exp(-(logit + mid)))) < target:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2


def simulate_hospital(
    space: CodeSpace,
    n: int,
    rng: np.random.Generator,
    *,
    prevalence: np.ndarray,
    id_base: int,
    visit_id_base: int,
    mean_codes: float = 19.0,
    visits_nb: tuple[float, float] = (0.7, 0.3),
    mortality: float = 0.12,
    in_hospital_share: float = 0.35,
    start: int = START,
    span_years: float = SPAN_YEARS,
) -> Hospital:
    """Draw patients, latent conditions, visits and coded diagnoses for one hospital (all vectorised)."""
    subject = id_base + np.sort(rng.choice(9_000_000, size=n, replace=False)).astype(np.int64)
    age = np.round(18 + 75 * rng.beta(2.6, 1.8, n)).astype(np.int64)
    female = rng.random(n) < 0.52
    n_cond, cond_patient, cond_off, cond, n_visits, onset = _conditions(
        space, age, rng, prevalence, visits_nb
    )
    visit_patient, visit_local, visit_off, admit, disch = _visits(n_visits, rng, start, span_years)
    visit_id = visit_id_base + rng.choice(9_000_000, size=len(visit_patient), replace=False).astype(np.int64)
    row_visit, row_seq, row_code, row_code10, row_condition = _diagnoses(
        space, rng, mean_codes, n_cond, cond_off, cond, onset, visit_patient, visit_local, admit
    )
    p, died, in_hosp, death = _mortality(
        space, rng, age, cond_patient, cond, disch[visit_off[1:] - 1], mortality, in_hospital_share
    )
    return Hospital(
        subject=subject, age=age, female=female, mortality_p=p, died_6m=died, death_time=death,
        died_in_hospital=in_hosp, visit_patient=visit_patient, visit_local=visit_local, admit=admit,
        disch=disch, visit_id=visit_id, row_visit=row_visit, row_seq=row_seq,
        row_code=row_code.astype(np.int32), row_code10=row_code10.astype(np.int32),
        row_condition=row_condition.astype(np.int32), cond_patient=cond_patient,
        cond_condition=cond, cond_onset=onset,
    )  # fmt: skip


def _conditions(space: CodeSpace, age: np.ndarray, rng: np.random.Generator, prevalence: np.ndarray,
                visits_nb: tuple[float, float]) -> tuple[np.ndarray, ...]:  # fmt: skip
    """Latent conditions: 1 + Poisson per patient, more with age, drawn by ``prevalence``; the number of
    visits; each condition's onset visit (condition slot 0 is active from the first visit)."""
    n = len(age)
    n_cond = np.minimum(1 + rng.poisson(2.5 + 5.0 * (age - 18) / 75), 24)
    cond_patient, cond_slot, cond_off = _groups(n_cond)
    cond = rng.choice(len(space.conditions), size=len(cond_patient), p=prevalence).astype(np.int32)
    n_visits = np.minimum(1 + rng.negative_binomial(*visits_nb, n), 120)
    onset = np.where(cond_slot == 0, 0, np.floor(rng.random(len(cond)) ** 2 * n_visits[cond_patient])).astype(
        np.int64
    )
    return n_cond, cond_patient, cond_off, cond, n_visits, onset


def _visits(
    n_visits: np.ndarray, rng: np.random.Generator, start: int, span_years: float
) -> tuple[np.ndarray, ...]:
    """Visits: the first admission uniform over the span, then exponential gaps; lengths of stay log-normal.
    (owner patient, index within the patient, patient offsets, admission and discharge times)."""
    visit_patient, visit_local, visit_off = _groups(n_visits)
    los = np.maximum(np.exp(rng.normal(np.log(4 * DAY), 0.7, len(visit_patient))), 3 * 3600).astype(np.int64)
    gap = rng.exponential(200 * DAY, len(visit_patient)).astype(np.int64) + 2 * DAY
    gap[visit_local == 0] = start + (rng.random(len(n_visits)) * span_years * 365.25 * DAY).astype(np.int64)
    step = gap + np.concatenate([[0], los[:-1]])
    step[visit_local == 0] = gap[visit_local == 0]
    admit = np.cumsum(step) - np.repeat(np.cumsum(step)[visit_off[:-1]] - step[visit_off[:-1]], n_visits)
    admit = admit - admit % 60
    disch = admit + los - (los % 60)
    return visit_patient, visit_local, visit_off, admit, disch


def _diagnoses(space: CodeSpace, rng: np.random.Generator, mean_codes: float, n_cond: np.ndarray,
               cond_off: np.ndarray, cond: np.ndarray, onset: np.ndarray, visit_patient: np.ndarray,
               visit_local: np.ndarray, admit: np.ndarray) -> tuple[np.ndarray, ...]:  # fmt: skip
    """Code rows: 1 + Poisson codes per visit with a per-patient rate, each from an active condition, in
    ICD-9-CM before the switch; a (visit, code) repeated is kept once. (visit, seq_num, code, its ICD-10
    code, condition) per row."""
    rate = rng.gamma(4.0, (mean_codes - 1) / 4.0, len(n_cond))
    n_codes = 1 + rng.poisson(rate[visit_patient])
    row_visit, _, _ = _groups(n_codes)
    row_patient = visit_patient[row_visit]
    slot = np.floor(rng.random(len(row_visit)) * n_cond[row_patient]).astype(np.int64)
    q = cond_off[row_patient] + slot
    inactive = onset[q] > visit_local[row_visit]
    q[inactive] = cond_off[row_patient[inactive]]
    row_condition = cond[q]
    u = rng.random(len(row_visit)) * (1 - 1e-9)
    cand = np.searchsorted(space.cand_cdf, row_condition + u, side="right")
    cand = np.clip(cand, space.cand_offsets[row_condition], space.cand_offsets[row_condition + 1] - 1)
    icd9 = admit[row_visit] < SWITCH
    row_code10 = space.cand_icd10[cand]
    row_code = np.where(icd9, space.cand_icd9[cand], row_code10)
    # dedupe (visit, code) keeping the first occurrence; seq_num = order of what is left
    key = row_visit * len(space.code_str) + row_code
    _, first = np.unique(key, return_index=True)
    keep = np.sort(first)
    row_visit = row_visit[keep]
    _, seq0, _ = _groups(np.bincount(row_visit, minlength=len(visit_patient)))
    return row_visit, (seq0 + 1).astype(np.int32), row_code[keep], row_code10[keep], row_condition[keep]


def _mortality(space: CodeSpace, rng: np.random.Generator, age: np.ndarray, cond_patient: np.ndarray,
               cond: np.ndarray, last_disch: np.ndarray, mortality: float,
               in_hospital_share: float) -> tuple[np.ndarray, ...]:  # fmt: skip
    """Death within 182 days of the last discharge, from condition severities and age, calibrated to
    ``mortality``: (probability, died, died in hospital, death time or -1; some deaths 6-12 months later)."""
    n = len(age)
    sev = np.zeros(n)
    np.add.at(sev, cond_patient, np.maximum(space.severity[cond], 0.0))
    logit = 0.9 * sev + 0.035 * (age - 65)
    p = 1 / (1 + np.exp(-(logit + _calibrate(logit, mortality))))
    died = rng.random(n) < p
    in_hosp = died & (rng.random(n) < in_hospital_share)
    late = ~died & (rng.random(n) < 0.5 * p)  # died 6-12 months later: dod recorded, label false
    death = np.full(n, -1, dtype=np.int64)
    death[died] = last_disch[died] + (rng.random(died.sum()) * 181 * DAY).astype(np.int64)
    death[in_hosp] = last_disch[in_hosp]
    death[late] = last_disch[late] + ((184 + rng.random(late.sum()) * 180) * DAY).astype(np.int64)
    return p, died, in_hosp, death


def universe_from_program(program: str | Path) -> set[tuple[str, str]]:
    """The (vocabulary, code) pairs of a compiled program's ICD concepts."""
    t = pq.read_table(Path(program) / "concepts.parquet", columns=["vocabulary", "code"])
    return {
        (v, c)
        for v, c in zip(t["vocabulary"].to_pylist(), t["code"].to_pylist(), strict=True)
        if v != "SPECIAL"
    }


def generate_cohort(
    out_dir: str | Path,
    n_patients: int = DEMO_PATIENTS,
    seed: int = 0,
    codes: set[tuple[str, str]] | str | Path | None = None,
    *,
    n_eicu: int | None = None,
    mortality: float = 0.12,
    threads: int | None = None,
) -> Path:
    """Write the MIMIC-IV-layout cohort, its eICU-layout sibling and ``ground_truth/`` into ``out_dir``.

    ``codes`` (a set of (vocabulary, dotless code), or a program folder) restricts emitted codes to that
    universe, but for about 1 % of each condition's codes so that unknown codes still occur. ``n_eicu``
    defaults to a quarter of ``n_patients``. The same arguments give byte-identical files.
    """
    t0 = time.perf_counter()
    out = Path(out_dir)
    if n_patients < 1:
        raise ValueError(f"n_patients must be positive, got {n_patients}")
    if isinstance(codes, (str, Path)):
        codes = universe_from_program(codes)
    space = build_code_space(seed, codes)
    rng = np.random.default_rng(seed)
    mimic = simulate_hospital(
        space, n_patients, rng, prevalence=space.prevalence, id_base=10_000_000, visit_id_base=20_000_000,
        mortality=mortality,
    )  # fmt: skip
    n_eicu = max(1, n_patients // 4) if n_eicu is None else n_eicu
    eicu = simulate_hospital(
        space, n_eicu, rng, prevalence=space.prevalence_eicu, id_base=100_000, visit_id_base=100_000,
        mean_codes=6.0, visits_nb=(1.0, 0.7), mortality=1.6 * mortality, in_hospital_share=0.85,
        start=int(np.datetime64("2114-01-01T00:00:00", "s").astype(np.int64)), span_years=1.5,
    )  # fmt: skip
    con = duckdb.connect()
    if threads:
        con.execute(f"SET threads={int(threads)}")
    write_mimic(con, out / "hosp", space, mimic, rng)
    write_eicu(con, out / "eicu", space, eicu, rng)
    write_ground_truth(out / "ground_truth", space, {"mimic-iv": mimic, "eicu": eicu}, seed=seed)
    # last, from a stream of its own: nothing above may change when these tables change
    extra = write_mimic_extra(
        con, out, space, mimic, SWITCH, np.random.default_rng([seed, EXTRA_TABLES_STREAM])
    )
    log.info(
        "cohort: %d MIMIC patients (%d diagnosis rows; %d ICU stays, %d procedure and %d prescription rows), "
        "%d eICU patients in %.1f s -> %s", n_patients, len(mimic.row_visit), extra["icu/icustays"],
        extra["hosp/procedures_icd"], extra["hosp/prescriptions"], n_eicu, time.perf_counter() - t0, out,
    )  # fmt: skip
    return out
