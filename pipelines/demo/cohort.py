"""Synthetic cohort with known ground truth, written in the exact MIMIC-IV and eICU layouts.

    generate_cohort("artifacts/ehr/demo", seed=0, codes=program)   # DEMO_PATIENTS patients

writes ``hosp/{patients,admissions,diagnoses_icd,d_icd_diagnoses}.csv.gz`` (MIMIC-IV v2 hosp module),
``eicu/{patient,diagnosis}.csv.gz`` (eICU-CRD v2.0, a second hospital with an intensive-care case mix)
and ``ground_truth/`` (see ``cohort_write.write_ground_truth``); then, for other MIMIC-IV tools (PyHealth's
loader reads ``icu/icustays`` always), the tables hrrbert itself does not read: ``icu/icustays``,
``hosp/{procedures_icd,d_icd_procedures,prescriptions}`` (MIMIC-IV v2.2 layouts), drawn inside the
admissions from their own random stream (:data:`EXTRA_TABLES_STREAM`) after everything else.

The model. Conditions are ICD-10-CM categories (``cohort_space``), with a Zipf prevalence headed by the
categories MIMIC-IV codes most. A patient has 1-3 body systems (ICD-10 chapters, more often circulatory,
endocrine, renal and neoplastic with age). Chronic conditions (Poisson, more with age, most within the
systems) start at an onset visit and are written with the same code there and, with :data:`RECODE`, at
every later visit; each visit also has 1 + Poisson acute codes, most within the systems. Codes are drawn
by popularity within their condition; visits before 2115-10-01 (shifted; 2015-10-01 real) are coded in
ICD-9-CM through the GEM. Death within 182 days of the last discharge follows the severity of the
patient's codes (the atoms of their program concepts: finding site, morphology, is-a ...; see
``cohort_program``) and age, and is written to ``dod`` (and ``deathtime`` for in-hospital deaths); ``dod``
is censored one year after the last discharge.

Reserved codes. About a third of the siblings of each condition's most common code (never that code, never
a twin of an ordinary code) are reserved: only the flagged MIMIC-IV patients (:data:`RESERVED_PATIENTS`)
have them, and they have nothing else; they have two visits or more, all after the ICD-10 switch. Their
conditions come from those with reserved codes, but by the ordinary chapter mix (:func:`flagged_chapter_mix`):
a body system, or a draw outside the systems, takes its chapter with the ordinary weights, then a condition
with reserved codes within it, so their last visits follow their histories as ordinary patients' do.
``ground_truth/task_probabilities.parquet`` holds the true label probabilities (``cohort_truth``). Every
per-row step is vectorised numpy; strings are formatted by DuckDB.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path

import duckdb
import numpy as np

from .cohort_program import ProgramFacts, read_program
from .cohort_space import CodeSpace, build_code_space
from .cohort_truth import N_CHAPTERS, category_probabilities, chapter_probabilities
from .cohort_write import Hospital, write_eicu, write_ground_truth, write_mimic, write_mimic_extra
from .defaults import DEMO_PATIENTS

log = logging.getLogger(__name__)

DAY = 86400
SWITCH = int(np.datetime64("2115-10-01T00:00:00", "s").astype(np.int64))  # ICD-9 -> ICD-10, shifted
START = int(np.datetime64("2108-01-01T00:00:00", "s").astype(np.int64))  # first admissions (2008 real)
SPAN_YEARS = 14.5  # first admissions spread over 2108-2122
# the extra MIMIC-IV tables draw from default_rng([seed, EXTRA_TABLES_STREAM]), never from the main stream
EXTRA_TABLES_STREAM = 220
GENERATOR_VERSION = (  # ground_truth/README.json "version"; a cached cohort of another version is regenerated
    "4"  # 4: ground_truth/next_visit_probabilities.parquet (every other file as version 3 wrote it)
)
RESERVED_PATIENTS = 0.025  # share of MIMIC patients coded with reserved codes only
SYSTEM_SHARE_CHRONIC = 0.7  # chance that a chronic condition is drawn within one of the patient's systems
SYSTEM_SHARE_ACUTE = 0.6  # the same for an acute code
RECODE = 0.8  # chance that an active chronic condition is coded again at a later visit
FIRST_VISIT_ONSET = 0.5  # chance that a chronic condition is active from the first visit
EARLIER_WEIGHT = 0.35  # weight of a code's severity when it is not in the last visit
MORTALITY_SEVERITY = 0.45  # log-odds of death per unit of summed code severity
# age trend of a system (ICD-10 chapter): log-weight per 20 years of age
SYSTEM_AGE_SLOPE = {2: 0.4, 4: 0.4, 6: 0.3, 9: 0.7, 10: 0.3, 14: 0.5, 5: -0.3, 15: -2.0, 16: -2.0, 17: -0.8,
                    19: -0.3, 20: -0.3}  # fmt: skip


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
    mean_acute: float = 5.0,
    chronic_rate: tuple[float, float] = (1.0, 6.0),
    visits_nb: tuple[float, float] = (0.7, 0.3),
    mortality: float = 0.12,
    in_hospital_share: float = 0.35,
    start: int = START,
    span_years: float = SPAN_YEARS,
    reserved_share: float = 0.0,
    ordered_visit_ids: bool = False,
) -> Hospital:
    """Draw patients, their systems and conditions, visits and coded diagnoses for one hospital (all
    vectorised); ``reserved_share`` of the patients (when the space has reserved codes) are flagged and
    coded with reserved codes only, after the ICD-10 switch."""
    subject = id_base + np.sort(rng.choice(9_000_000, size=n, replace=False)).astype(np.int64)
    age = np.round(18 + 75 * rng.beta(2.6, 1.8, n)).astype(np.int64)
    female = rng.random(n) < 0.52
    flagged = (rng.random(n) < reserved_share) & bool(space.has_reserved.any())
    draws = _Draws(space, prevalence)
    sys_off, sys_chapter = _systems(draws, age, flagged, rng)
    n_visits = np.minimum(1 + flagged + rng.negative_binomial(*visits_nb, n), 120)
    first = start + (rng.random(n) * span_years * 365.25 * DAY).astype(np.int64)
    first[flagged] = SWITCH + ((30 + rng.random(int(flagged.sum())) * 4 * 365.25) * DAY).astype(np.int64)
    visit_patient, visit_local, visit_off, admit, disch = _visits(n_visits, rng, first)
    visit_id = visit_id_base + rng.choice(9_000_000, size=len(visit_patient), replace=False).astype(np.int64)
    if ordered_visit_ids:  # eICU orders a patient's stays by discharge year, then by this id
        visit_id = np.sort(visit_id)
    cond_patient, cond, onset, cond_cand = _chronic(
        space, draws, age, flagged, sys_off, sys_chapter, n_visits, chronic_rate, rng
    )
    rate = rng.gamma(3.0, (mean_acute - 1.0) / 3.0, n)
    rows = _diagnoses(
        space,
        draws,
        rng,
        rate,
        flagged,
        sys_off,
        sys_chapter,
        cond_patient,
        cond,
        onset,
        cond_cand,
        visit_patient,
        visit_local,
        visit_off,
        admit,
    )
    row_visit, row_seq, row_cand, row_code, row_condition = rows
    last_visit = visit_off[1:] - 1
    p, died, in_hosp, death = _mortality(
        space,
        rng,
        age,
        visit_patient[row_visit],
        row_visit == last_visit[visit_patient[row_visit]],
        row_cand,
        disch[last_visit],
        mortality,
        in_hospital_share,
    )
    latent = {  # what the chapter and category probabilities of the last visit read
        "flagged": flagged,
        "icd9": admit[last_visit] < SWITCH,
        "rate": rate,
        "sys_off": sys_off,
        "sys_chapter": sys_chapter,
        "cond_patient": cond_patient,
        "cond_cand": cond_cand,
        "cond_last": onset == n_visits[cond_patient] - 1,
        "system_share": SYSTEM_SHARE_ACUTE,
        "recode": RECODE,
    }
    chapters = chapter_probabilities(space, draws, **latent)
    next_visit = category_probabilities(space, draws, **latent)  # the next-visit ceiling: same formula
    return Hospital(
        subject=subject,
        age=age,
        female=female,
        mortality_p=p,
        died_6m=died,
        death_time=death,
        died_in_hospital=in_hosp,
        visit_patient=visit_patient,
        visit_local=visit_local,
        admit=admit,
        disch=disch,
        visit_id=visit_id,
        row_visit=row_visit,
        row_seq=row_seq,
        row_code=row_code.astype(np.int32),
        row_code10=space.cand_icd10[row_cand].astype(np.int32),
        row_condition=row_condition.astype(np.int32),
        cond_patient=cond_patient,
        cond_condition=cond,
        cond_onset=onset,
        cond_code=space.cand_icd10[cond_cand].astype(np.int32),
        reserved=flagged,
        systems_offsets=sys_off,
        systems=sys_chapter,
        chapter_probs=chapters,
        label_mortality_p=p,
        reader_subject=subject,
        next_visit=next_visit,
    )


class _Draws:
    """Condition draws by prevalence, chronic or acute, for ordinary or flagged patients, from all
    conditions or from one ICD-10 chapter's (a patient's system): ``draw(kind, flagged, chapter, u)``."""

    def __init__(self, space: CodeSpace, prevalence: np.ndarray) -> None:
        k = len(space.conditions)
        self.chapter = space.chapter.astype(np.int64)
        self.order = np.lexsort((np.arange(k), self.chapter))  # conditions by chapter
        ch_sorted = self.chapter[self.order]
        self.bounds = np.searchsorted(ch_sorted, np.arange(N_CHAPTERS + 2))  # chapter c: [b[c], b[c+1])
        res = space.has_reserved.astype(np.float64)
        self.weights = {
            ("chronic", False): prevalence * space.chronic,
            ("acute", False): prevalence * (1 - space.chronic),
            ("chronic", True): prevalence * space.chronic * res,
            ("acute", True): prevalence * (1 - space.chronic) * res,
        }
        self.cdf, self.cdf_all, self.mass, self.flagged_chapters = {}, {}, {}, {}
        for key, w in self.weights.items():
            ws = w[self.order]
            self.mass[key] = np.bincount(self.chapter, weights=w, minlength=N_CHAPTERS + 1)
            total = self.mass[key][ch_sorted]
            within = np.where(total > 0, ws / np.where(total > 0, total, 1.0), 0.0)
            csum = np.cumsum(within)
            before = np.concatenate([[0.0], csum])[self.bounds[ch_sorted]]
            self.cdf[key] = ch_sorted + np.minimum(csum - before, 1.0 - 1e-12)
            if not key[1]:  # flagged draws always have a chapter (their system, or one from the mix below)
                self.cdf_all[key] = np.minimum(np.cumsum(ws) / max(ws.sum(), 1e-300), 1.0 - 1e-12)
        for kind in ("chronic", "acute"):
            self.flagged_chapters[kind] = flagged_chapter_mix(self.mass[kind, False], self.mass[kind, True])

    def draw(self, kind: str, flagged: np.ndarray, chapter: np.ndarray, u: np.ndarray) -> np.ndarray:
        """One condition per element: from ``chapter`` (its patient's system) where it is > 0, else from all
        conditions; ``flagged`` elements draw among the conditions that have reserved codes, in a chapter
        drawn by the ordinary mix where no system is given (:func:`flagged_chapter_mix`)."""
        u = u * (1 - 1e-9)
        out = np.empty(len(u), dtype=np.int64)
        for f in (False, True):
            sel = flagged == f
            if not sel.any():
                continue
            ch, uu = chapter[sel], u[sel]
            if f:  # a chapter by the ordinary mix first, then a condition with reserved codes within it
                ch, uu = _split_uniform(self.flagged_chapters[kind], ch, uu)
            i_sys = np.searchsorted(self.cdf[kind, f], ch + uu, side="right")
            i_sys = np.clip(i_sys, self.bounds[ch], self.bounds[ch + 1] - 1)
            if not f:
                i_all = np.searchsorted(self.cdf_all[kind, f], uu, side="right")
                i_sys = np.where(ch > 0, i_sys, np.minimum(i_all, len(self.order) - 1))
            out[sel] = self.order[i_sys]
        return out


def flagged_chapter_mix(ordinary: np.ndarray, flagged: np.ndarray) -> np.ndarray:
    """(H,) chapter distribution of a flagged patient's draw that no system constrains: the ordinary
    patients' chapter mass, over the chapters that have conditions with reserved codes. Flagged patients
    thereby get each chapter as often as ordinary ones do (the outcomes read chapters), and only the
    conditions within a chapter are limited to those with reserved codes."""
    m = np.where(flagged > 0, ordinary, 0.0)
    m[0] = 0.0
    return m / m.sum()


def _split_uniform(mix: np.ndarray, chapter: np.ndarray, u: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Where ``chapter`` is 0 (no system): a chapter drawn from ``mix`` with ``u``, and ``u`` rescaled to a
    fresh uniform within that chapter's share (one uniform serves both draws)."""
    cdf = np.cumsum(mix)
    c = np.minimum(np.searchsorted(cdf, u, side="right"), len(mix) - 1)
    c = np.where(mix[c] > 0, c, np.flatnonzero(mix)[-1])  # u at the top edge: the last chapter with mass
    lo = cdf[c] - mix[c]
    fresh = np.clip((u - lo) / mix[c], 0.0, 1.0 - 1e-9)
    free = chapter == 0
    return np.where(free, c, chapter), np.where(free, fresh, u)


def _systems(
    draws: _Draws, age: np.ndarray, flagged: np.ndarray, rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray]:
    """Each patient's 1-3 body systems (ICD-10 chapters), drawn without replacement by the chapter's
    prevalence (square root) and age, the ordinary prevalence for flagged patients too (over the chapters
    that have conditions with reserved codes); CSR (offsets, chapters)."""
    n = len(age)
    x = (age[:, None] - 55) / 20.0
    slope = np.array([SYSTEM_AGE_SLOPE.get(c, 0.0) for c in range(N_CHAPTERS + 1)])
    keys = np.empty((n, N_CHAPTERS + 1))
    for f in (False, True):
        sel = flagged == f
        mass = draws.mass["chronic", False] + draws.mass["acute", False]
        if f:  # the ordinary patients' mix, over the chapters flagged patients can be coded in
            mass = flagged_chapter_mix(mass, draws.mass["chronic", True] + draws.mass["acute", True])
        with np.errstate(divide="ignore"):
            base = np.where(mass > 0, 0.5 * np.log(np.where(mass > 0, mass, 1.0)), -np.inf)
        base[0] = -np.inf
        keys[sel] = base + slope * x[sel]
    keys += rng.gumbel(size=keys.shape)  # Gumbel top-k: a draw without replacement by weight
    available = np.isfinite(keys).sum(axis=1)
    n_sys = np.minimum(1 + rng.binomial(2, 0.35, n), available)
    ranked = np.argsort(-keys, axis=1, kind="stable")
    take = np.arange(N_CHAPTERS + 1)[None, :] < n_sys[:, None]
    return np.concatenate([[0], np.cumsum(n_sys)]), ranked[take].astype(np.int64)


def _pick_system(
    sys_off: np.ndarray, sys_chapter: np.ndarray, patient: np.ndarray, u: np.ndarray
) -> np.ndarray:
    """A chapter drawn uniformly among each element's patient's systems."""
    n_sys = sys_off[patient + 1] - sys_off[patient]
    return sys_chapter[sys_off[patient] + (u * n_sys).astype(np.int64)]


def _code(space: CodeSpace, cond: np.ndarray, flagged: np.ndarray, u: np.ndarray) -> np.ndarray:
    """A candidate code of each condition by popularity: reserved codes for flagged elements."""
    u = u * (1 - 1e-9)
    cand = np.where(
        flagged,
        np.searchsorted(space.cand_cdf_reserved, cond + u, side="right"),
        np.searchsorted(space.cand_cdf, cond + u, side="right"),
    )
    return np.clip(cand, space.cand_offsets[cond], space.cand_offsets[cond + 1] - 1)


def _chronic(
    space: CodeSpace,
    draws: _Draws,
    age: np.ndarray,
    flagged: np.ndarray,
    sys_off: np.ndarray,
    sys_chapter: np.ndarray,
    n_visits: np.ndarray,
    chronic_rate: tuple[float, float],
    rng: np.random.Generator,
) -> tuple[np.ndarray, ...]:
    """Chronic conditions: Poisson per patient, more with age, most within the patient's systems; each
    with an onset visit and the one code it is written with. (patient, condition, onset, candidate)."""
    n_draw = rng.poisson(chronic_rate[0] + chronic_rate[1] * ((age - 18) / 75.0) ** 1.2)
    patient = np.repeat(np.arange(len(age)), n_draw)
    u_sys, u_pick, u_cond = rng.random((3, len(patient)))
    chapter = np.where(u_sys < SYSTEM_SHARE_CHRONIC, _pick_system(sys_off, sys_chapter, patient, u_pick), 0)
    cond = draws.draw("chronic", flagged[patient], chapter, u_cond)
    _, first = np.unique(patient * len(space.conditions) + cond, return_index=True)
    keep = np.sort(first)  # a condition drawn twice is one condition
    patient, cond = patient[keep], cond[keep]
    u_onset, u_when, u_code = rng.random((3, len(patient)))
    onset = np.where(u_onset < FIRST_VISIT_ONSET, 0, (u_when * n_visits[patient]).astype(np.int64))
    cand = _code(space, cond, flagged[patient], u_code)
    return patient, cond.astype(np.int32), onset.astype(np.int64), cand


def _visits(n_visits: np.ndarray, rng: np.random.Generator, first: np.ndarray) -> tuple[np.ndarray, ...]:
    """Visits: the first admission at ``first``, then exponential gaps; lengths of stay log-normal.
    (owner patient, index within the patient, patient offsets, admission and discharge times)."""
    visit_patient, visit_local, visit_off = _groups(n_visits)
    los = np.maximum(np.exp(rng.normal(np.log(4 * DAY), 0.7, len(visit_patient))), 3 * 3600).astype(np.int64)
    gap = rng.exponential(200 * DAY, len(visit_patient)).astype(np.int64) + 2 * DAY
    gap[visit_local == 0] = first
    step = gap + np.concatenate([[0], los[:-1]])
    step[visit_local == 0] = gap[visit_local == 0]
    admit = np.cumsum(step) - np.repeat(np.cumsum(step)[visit_off[:-1]] - step[visit_off[:-1]], n_visits)
    admit = admit - admit % 60
    disch = admit + los - (los % 60)
    return visit_patient, visit_local, visit_off, admit, disch


def _diagnoses(
    space: CodeSpace,
    draws: _Draws,
    rng: np.random.Generator,
    rate: np.ndarray,
    flagged: np.ndarray,
    sys_off: np.ndarray,
    sys_chapter: np.ndarray,
    cond_patient: np.ndarray,
    cond: np.ndarray,
    onset: np.ndarray,
    cond_cand: np.ndarray,
    visit_patient: np.ndarray,
    visit_local: np.ndarray,
    visit_off: np.ndarray,
    admit: np.ndarray,
) -> tuple[np.ndarray, ...]:
    """Code rows of each visit: first 1 + Poisson(rate) acute codes (most within the patient's systems),
    then the code of each active chronic condition (always at its onset visit, else with ``RECODE``); in
    ICD-9-CM before the switch; a (visit, code) repeated is kept once. (visit, seq_num, candidate, code,
    condition) per row."""
    n_acute = 1 + rng.poisson(rate[visit_patient])
    a_visit = np.repeat(np.arange(len(visit_patient)), n_acute)
    a_patient = visit_patient[a_visit]
    u_sys, u_pick, u_cond, u_code = rng.random((4, len(a_visit)))
    chapter = np.where(u_sys < SYSTEM_SHARE_ACUTE, _pick_system(sys_off, sys_chapter, a_patient, u_pick), 0)
    a_cond = draws.draw("acute", flagged[a_patient], chapter, u_cond)
    a_cand = _code(space, a_cond, flagged[a_patient], u_code)
    # chronic: each condition at every visit from its onset on
    n_vis = visit_off[cond_patient + 1] - visit_off[cond_patient]
    span = n_vis - onset
    c_idx = np.repeat(np.arange(len(cond)), span)
    c_local = onset[c_idx] + (np.arange(len(c_idx)) - np.repeat(np.cumsum(span) - span, span))
    emit = (c_local == onset[c_idx]) | (rng.random(len(c_idx)) < RECODE)
    c_idx, c_local = c_idx[emit], c_local[emit]
    c_visit = visit_off[cond_patient[c_idx]] + c_local
    row_visit = np.concatenate([a_visit, c_visit])
    row_cand = np.concatenate([a_cand, cond_cand[c_idx]])
    row_condition = np.concatenate([a_cond, cond[c_idx]])
    order = np.lexsort((np.arange(len(row_visit)), row_visit))  # by visit: acute first, then chronic
    row_visit, row_cand, row_condition = row_visit[order], row_cand[order], row_condition[order]
    icd9 = admit[row_visit] < SWITCH
    row_code = np.where(icd9, space.cand_icd9[row_cand], space.cand_icd10[row_cand])
    # dedupe (visit, code) keeping the first occurrence; seq_num = order of what is left
    key = row_visit * len(space.code_str) + row_code
    _, first = np.unique(key, return_index=True)
    keep = np.sort(first)
    row_visit = row_visit[keep]
    _, seq0, _ = _groups(np.bincount(row_visit, minlength=len(visit_patient)))
    return row_visit, (seq0 + 1).astype(np.int32), row_cand[keep], row_code[keep], row_condition[keep]


def _mortality(
    space: CodeSpace,
    rng: np.random.Generator,
    age: np.ndarray,
    row_patient: np.ndarray,
    row_last: np.ndarray,
    row_cand: np.ndarray,
    last_disch: np.ndarray,
    mortality: float,
    in_hospital_share: float,
) -> tuple[np.ndarray, ...]:
    """Death within 182 days of the last discharge, from the severity of the patient's distinct codes (the
    atoms of their concepts and their category; those of the last visit count fully, earlier ones
    ``EARLIER_WEIGHT``) and age, calibrated to ``mortality``: (probability, died, died in hospital, death
    time or -1; some deaths 6-12 months later)."""
    n = len(age)
    c = len(space.cand_severity)
    key = row_patient * c + row_cand
    order = np.lexsort((~row_last, key))  # per (patient, code): a last-visit row first
    key_sorted = key[order]
    first = np.r_[True, key_sorted[1:] != key_sorted[:-1]]
    pick = order[first]
    weight = np.where(row_last[pick], 1.0, EARLIER_WEIGHT) * np.maximum(
        space.cand_severity[row_cand[pick]], 0.0
    )
    sev = np.bincount(row_patient[pick], weights=weight, minlength=n)
    logit = MORTALITY_SEVERITY * sev + 0.035 * (age - 65)
    p = 1 / (1 + np.exp(-(logit + _calibrate(logit, mortality))))
    died = rng.random(n) < p
    in_hosp = died & (rng.random(n) < in_hospital_share)
    late = ~died & (rng.random(n) < 0.5 * p)  # died 6-12 months later: dod recorded, label false
    death = np.full(n, -1, dtype=np.int64)
    death[died] = last_disch[died] + (rng.random(died.sum()) * 181 * DAY).astype(np.int64)
    death[in_hosp] = last_disch[in_hosp]
    death[late] = last_disch[late] + ((184 + rng.random(late.sum()) * 180) * DAY).astype(np.int64)
    return p, died, in_hosp, death


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
    facts: ProgramFacts | None = None
    if isinstance(codes, (str, Path)):
        facts = read_program(codes, seed)
        codes = facts.universe
    space = build_code_space(seed, codes, facts=facts)
    rng = np.random.default_rng(seed)
    mimic = simulate_hospital(
        space,
        n_patients,
        rng,
        prevalence=space.prevalence,
        id_base=10_000_000,
        visit_id_base=20_000_000,
        mortality=mortality,
        reserved_share=RESERVED_PATIENTS,
    )
    n_eicu = max(1, n_patients // 4) if n_eicu is None else n_eicu
    eicu = simulate_hospital(
        space,
        n_eicu,
        rng,
        prevalence=space.prevalence_eicu,
        id_base=100_000,
        visit_id_base=100_000,
        mean_acute=3.0,
        chronic_rate=(0.5, 3.0),
        visits_nb=(1.0, 0.7),
        mortality=1.6 * mortality,
        in_hospital_share=0.85,
        start=int(np.datetime64("2114-01-01T00:00:00", "s").astype(np.int64)),
        span_years=1.5,
        ordered_visit_ids=True,
    )
    eicu.label_mortality_p = 0.85 * eicu.mortality_p  # eICU's label is death in hospital
    con = duckdb.connect()
    if threads:
        con.execute(f"SET threads={int(threads)}")
    write_mimic(con, out / "hosp", space, mimic, rng)
    eicu.reader_subject = write_eicu(con, out / "eicu", space, eicu, rng)
    write_ground_truth(
        out / "ground_truth", space, {"mimic-iv": mimic, "eicu": eicu}, seed=seed, version=GENERATOR_VERSION
    )
    # last, from a stream of its own: nothing above may change when these tables change
    extra = write_mimic_extra(
        con, out, space, mimic, SWITCH, np.random.default_rng([seed, EXTRA_TABLES_STREAM])
    )
    log.info(
        "cohort: %d MIMIC patients (%d diagnosis rows; %d ICU stays, %d procedure and %d prescription rows), "
        "%d eICU patients in %.1f s -> %s",
        n_patients,
        len(mimic.row_visit),
        extra["icu/icustays"],
        extra["hosp/procedures_icd"],
        extra["hosp/prescriptions"],
        n_eicu,
        time.perf_counter() - t0,
        out,
    )
    return out
