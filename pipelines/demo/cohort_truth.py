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

The same formula with a code's next-visit category (:func:`pipelines.data.next_visit.category_of`: its
three-character ICD-10-CM category, or its ICD-9-CM category in an ICD-9 visit) in place of its chapter
gives P(category in the last visit) (:func:`category_probabilities`): the ceiling of the next-visit
evaluation, which keeps each patient's :data:`NEXT_VISIT_TOP` most probable categories.

Dimensions: P patients, K conditions, C candidates, H = 23 chapters (0 = none), L categories.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import scipy.sparse as sp

from pipelines.data.next_visit import category_of

NEXT_VISIT_TOP = 30  # categories kept per patient: the largest k of the next-visit recall
CHUNK = 2048  # patients whose (P, L) probabilities are held at once

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


def code_categories(space: CodeSpace) -> tuple[np.ndarray, np.ndarray]:
    """Every code's next-visit category: ``(names (L,), label (M,))``, names like ``ICD10CM:I10`` (sorted),
    label -1 for a code without one."""
    vocab = np.where(space.code_version == 9, "ICD9CM", "ICD10CM")
    name = [
        None if (c := category_of(v, code)) is None else f"{v}:{c}"
        for v, code in zip(vocab.tolist(), space.code_str.tolist(), strict=True)
    ]
    names = np.array(sorted({n for n in name if n is not None}), dtype=object)
    index = {n: i for i, n in enumerate(names)}
    return names, np.array([-1 if n is None else index[n] for n in name], dtype=np.int64)


def category_probabilities(
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
    top: int = NEXT_VISIT_TOP,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The ``top`` most probable next-visit categories of each patient's last visit, by the formula of the
    module docstring: ``(names (L,), patient (P*top,), label (P*top,), probability (P*top,))``, each
    patient's rows most probable first (ties by category name). Arguments as :func:`chapter_probabilities`."""
    names, code_label = code_categories(space)
    n, n_labels = len(flagged), len(names)
    top = min(top, n_labels)
    # chronic codes of the last visit: log P(not written) per (patient, category), certain at an onset
    version_code = np.where(icd9[cond_patient], space.cand_icd9[cond_cand], space.cand_icd10[cond_cand])
    c_label = code_label[version_code]
    c_keep = c_label >= 0
    log_q = sp.csr_matrix(
        (np.where(cond_last, -np.inf, np.log1p(-recode))[c_keep], (cond_patient[c_keep], c_label[c_keep])),
        shape=(n, n_labels),
    )  # duplicates summed (-inf where some chronic code of the category is certain)
    out_p, out_l, out_v = [], [], []
    for f in (False, True):
        for nine in (False, True):
            sel = np.flatnonzero((flagged == f) & (icd9 == nine))
            if len(sel) == 0:
                continue
            per_system, overall = _acute_label_mass(
                space, draws, f, nine, code_label, n_labels
            )  # (H, L), (L,)
            for chunk in np.array_split(sel, max(1, -(-len(sel) // CHUNK))):
                n_sys = sys_off[chunk + 1] - sys_off[chunk]
                owner = np.repeat(np.arange(len(chunk)), n_sys)
                local = np.arange(len(owner)) - np.repeat(np.cumsum(n_sys) - n_sys, n_sys)
                chapters = sys_chapter[sys_off[chunk][owner] + local]
                pick = sp.csr_matrix(
                    (1.0 / n_sys[owner], (owner, chapters)), shape=(len(chunk), per_system.shape[0])
                )
                s = system_share * (pick @ per_system) + (1 - system_share) * overall  # (B, L)
                q = np.exp(log_q[chunk].toarray())  # (B, L): no chronic code of the category written
                p = np.clip(1 - q * (1 - s) * np.exp(-rate[chunk, None] * s), 0.0, 1.0)
                best = np.argsort(-p, axis=1, kind="stable")[:, :top]  # ties: the lower label index first
                out_p.append(np.repeat(chunk, top))
                out_l.append(best.reshape(-1))
                out_v.append(np.take_along_axis(p, best, 1).reshape(-1))
    patient, label, prob = (np.concatenate(x) if x else np.zeros(0) for x in (out_p, out_l, out_v))
    order = np.argsort(patient, kind="stable")
    return names, patient[order].astype(np.int64), label[order].astype(np.int64), prob[order]


def _acute_label_mass(
    space: CodeSpace, draws: _Draws, flagged: bool, icd9: bool, code_label: np.ndarray, n_labels: int
) -> tuple[np.ndarray, np.ndarray]:
    """:func:`_acute_chapter_mass` with each code's label in place of its chapter: ``(H, L)``, ``(L,)``."""
    h = N_CHAPTERS + 1
    k = len(space.conditions)
    weight = space.cand_weight_reserved if flagged else space.cand_weight
    code = space.cand_icd9 if icd9 else space.cand_icd10
    owner = np.repeat(np.arange(k), np.diff(space.cand_offsets))
    lab = code_label[code]
    ok = lab >= 0
    by_condition = sp.csr_matrix((weight[ok], (owner[ok], lab[ok])), shape=(k, n_labels))  # (K, L)
    w = draws.weights["acute", flagged]
    mass = draws.mass["acute", flagged]
    within = np.where(
        mass[draws.chapter] > 0, w / np.where(mass[draws.chapter] > 0, mass[draws.chapter], 1), 0
    )
    to_system = sp.csr_matrix((within, (draws.chapter, np.arange(k))), shape=(h, k))  # (H, K)
    per_system = np.asarray((to_system @ by_condition).todense())  # (H, L)
    if flagged:  # a chapter by the ordinary mix, then a condition within it (cohort.flagged_chapter_mix)
        overall = draws.flagged_chapters["acute"] @ per_system
    else:
        overall = np.asarray(by_condition.T @ (w / w.sum())).ravel()
    return per_system, overall
