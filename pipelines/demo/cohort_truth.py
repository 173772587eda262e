"""The true probability of each chapters-task label given the cohort generator's latent state.

The chapters label of a patient is the set of chapters of the codes of its last visit (as the readers
count them, ``CodeSpace.code_chapter``). In ``cohort._diagnoses`` that visit holds

* the code of every chronic condition j of the patient (all are active at the last visit): with certainty
  when j's onset is the last visit, else with probability ``recode``, independently;
* n = 1 + N acute codes, N ~ Poisson(rate_i), each drawn independently from the patient's mixture
  ``s_i = a * mean_{h in systems_i} S[h] + (1 - a) * G`` over chapters, where S[h] (G) is the chapter mass
  of a draw from system h (from all conditions): conditions by acute prevalence, codes by popularity
  (reserved ones for flagged patients), the code written in ICD-9-CM when the visit is before the switch.

Dropping a repeated (visit, code) does not change which chapters are present, so with q_ic the chance that
no chronic code of chapter c is written,

    P(chapter c in the last visit) = 1 - q_ic * E[(1 - s_ic)^(1+N)]
                                   = 1 - q_ic * (1 - s_ic) * exp(-rate_i * s_ic)

exactly, for the MIMIC-IV layout. (eICU writes a code's ICD-9 part, its ICD-10 part, both or neither; its
probabilities use the same formula and so are an approximation there.)

Dimensions: P patients, K conditions, C candidates, H = 23 chapters (0 = none).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from .cohort import _Draws
    from .cohort_space import CodeSpace

N_CHAPTERS = 22


def chapter_probabilities(
    space: CodeSpace,
    draws: _Draws,
    *,
    flagged: np.ndarray,
    icd9: np.ndarray,
    rate: np.ndarray,
    sys_off: np.ndarray,
    sys_chapter: np.ndarray,
    cond_patient: np.ndarray,
    cond_cand: np.ndarray,
    cond_last: np.ndarray,
    system_share: float,
    recode: float,
) -> np.ndarray:
    """(P, 22) float64: P(chapter i+1 occurs among the codes of the patient's last visit).

    ``icd9`` (P,): the last visit is coded in ICD-9-CM; ``rate`` (P,): the acute Poisson rate; systems as
    CSR (``sys_off``, ``sys_chapter``); chronic conditions by patient with their code and whether their onset
    is the last visit."""
    n = len(flagged)
    h = N_CHAPTERS + 1
    s = np.zeros((n, h))
    for f in (False, True):
        for nine in (False, True):
            sel = np.flatnonzero((flagged == f) & (icd9 == nine))
            if len(sel) == 0:
                continue
            per_system, overall = _acute_chapter_mass(space, draws, f, nine)  # (H, H), (H,)
            n_sys = sys_off[sel + 1] - sys_off[sel]
            owner = np.repeat(np.arange(len(sel)), n_sys)
            local = np.arange(len(owner)) - np.repeat(np.cumsum(n_sys) - n_sys, n_sys)
            chapters = sys_chapter[sys_off[sel][owner] + local]
            mix = np.zeros((len(sel), h))
            np.add.at(mix, owner, per_system[chapters] / n_sys[owner][:, None])
            s[sel] = system_share * mix + (1 - system_share) * overall
    # chronic codes of the last visit
    version_code = np.where(icd9[cond_patient], space.cand_icd9[cond_cand], space.cand_icd10[cond_cand])
    chapter = space.code_chapter[version_code].astype(np.int64)
    log_q = np.zeros((n, h))
    np.add.at(log_q, (cond_patient, chapter), np.where(cond_last, 0.0, np.log1p(-recode)))
    certain = np.zeros((n, h), dtype=bool)
    certain[cond_patient[cond_last], chapter[cond_last]] = True
    q = np.where(certain, 0.0, np.exp(log_q))
    p = 1 - q * (1 - s) * np.exp(-rate[:, None] * s)
    return np.clip(p[:, 1:], 0.0, 1.0)


def _acute_chapter_mass(space: CodeSpace, draws: _Draws, flagged: bool, icd9: bool) -> tuple[np.ndarray, ...]:
    """Chapter distribution of one acute draw: from system h (row h of (H, H)) and from all conditions."""
    h = N_CHAPTERS + 1
    k = len(space.conditions)
    weight = space.cand_weight_reserved if flagged else space.cand_weight
    code = space.cand_icd9 if icd9 else space.cand_icd10
    owner = np.repeat(np.arange(k), np.diff(space.cand_offsets))
    by_condition = np.zeros((k, h))  # (K, H): chapter mass of the condition's code draw
    np.add.at(by_condition, (owner, space.code_chapter[code].astype(np.int64)), weight)
    w = draws.weights["acute", flagged]
    mass = draws.mass["acute", flagged]
    within = np.where(
        mass[draws.chapter] > 0, w / np.where(mass[draws.chapter] > 0, mass[draws.chapter], 1), 0
    )
    per_system = np.zeros((h, h))
    np.add.at(per_system, draws.chapter, within[:, None] * by_condition)
    if flagged:  # a chapter by the ordinary mix, then a condition within it (cohort.flagged_chapter_mix)
        overall = draws.flagged_chapters["acute"] @ per_system
    else:
        overall = (w / w.sum()) @ by_condition
    return per_system, overall
