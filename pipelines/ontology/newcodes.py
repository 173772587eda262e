"""How a model carried to a new program handles the codes the new program added.

A *new code* is a token of the new program whose (vocabulary, code) the old program lacks
(:func:`new_code_rows`). Three measures, each on the same patients or codes for every model:

- **MLM** (:func:`mlm_probes`, :func:`mlm_ranks`): every occurrence of a new code in a patient's
  sequence, replaced by ``[MASK]`` (one at a time, the rest of the sequence as it is); the probe's rank
  is the number of tokens the model scores above the true code, plus half the tokens it scores exactly
  the same (the expected rank when ties are broken at random: a model that gives every new code the same
  vector and bias, as a plain table with new codes at ``[UNK]`` does, is not credited for the tie). A
  probe is a hit at k when its rank is below k. Probes of one patient are not independent, so
  :func:`patient_hits` averages them per patient, and intervals resample patients.
- **Neighbours** (:func:`neighbour_relatedness`): the ``k`` nearest codes (cosine of the token embedding
  matrix) of each query code, drawn from a pool (the codes the model was trained with), scored related or
  not by :class:`pipelines.eval.neighbours.Ontology` (the evaluation's rule: two is-a steps, or a shared
  finding site and morphology).
  A code with a *twin* (another code mapped to one of its SNOMED concepts, such as an ICD-9 and an
  ICD-10 code of one disorder, :func:`has_twin`) has a related neighbour by construction, which most old
  codes have and most new codes lack; :func:`matched_sample` draws old codes with the new codes' share of
  twins, the like-for-like reference.
- **Tasks**: a fine-tuned model carried over is scored on the patients whose history holds a new code
  (:func:`history_holds`), by the fine-tuning predictions of :mod:`pipelines.train.finetune`.

Dimension legend: P patients (sequences), T codes, Q probes or queries, N concepts, D dimension, K top-k.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from pipelines.data.sequences import Sequences
from pipelines.eval.neighbours import Ontology, nearest

__all__ = [
    "TOPK",
    "Probes",
    "new_code_rows",
    "history_holds",
    "mlm_probes",
    "mlm_ranks",
    "patient_hits",
    "neighbour_relatedness",
    "has_twin",
    "matched_sample",
]

TOPK = (1, 10, 100)


def new_code_rows(old, new) -> np.ndarray:
    """Rows of ``new`` (a :class:`hrr_kernel.Program`) whose (vocabulary, code) ``old`` lacks, specials
    excluded. Shapes: output ``(Q,)`` int64, ascending."""
    from hrr_kernel import token_sources

    src = token_sources(old, new).numpy()
    special = np.array([v == "SPECIAL" for v in new.concept_vocabularies], dtype=bool)
    return np.flatnonzero((src < 0) & ~special).astype(np.int64)


def history_holds(seqs: Sequences, rows: np.ndarray) -> np.ndarray:
    """Which sequences hold at least one of ``rows`` among their real tokens. Shapes: ``(P,)`` bool."""
    ids = seqs.input_ids.numpy()
    real = seqs.attention_mask.numpy().astype(bool)
    return (np.isin(ids, rows) & real).any(axis=1)


@dataclass
class Probes:
    """One probe per occurrence of a code of interest: sequence ``row``, position ``col``, true ``code``,
    and the patient (``subject_id``) it belongs to. Shapes: each ``(Q,)`` int64."""

    row: np.ndarray
    col: np.ndarray
    code: np.ndarray
    subject_id: np.ndarray

    def __len__(self) -> int:
        return int(self.row.size)


def mlm_probes(seqs: Sequences, rows: np.ndarray) -> Probes:
    """Every occurrence of one of ``rows`` among the real tokens of ``seqs``."""
    ids = seqs.input_ids.numpy()
    real = seqs.attention_mask.numpy().astype(bool)
    r, c = np.nonzero(np.isin(ids, rows) & real)
    return Probes(
        r.astype(np.int64), c.astype(np.int64), ids[r, c].astype(np.int64), seqs.subject_id.numpy()[r]
    )


@torch.no_grad()
def mlm_ranks(model, seqs: Sequences, probes: Probes, *, batch_size: int = 128, device=None) -> np.ndarray:
    """The rank of each probe's true code among all tokens (0 = first; ties count half, see the module
    docstring). Shapes: output ``(Q,)`` float64."""
    device = device or model.program.device
    mask_id = model.program.special_id("[MASK]")
    was = model.training
    model.eval()
    e = model.token_matrix()  # (N, D), built once
    out = np.zeros(len(probes), dtype=np.float64)
    for s in range(0, len(probes), batch_size):
        r = torch.as_tensor(probes.row[s : s + batch_size])
        c = torch.as_tensor(probes.col[s : s + batch_size])
        b = torch.arange(len(r))
        att = seqs.attention_mask[r].bool()  # (B, T)
        t = max(int(att.sum(1).max()), 1)
        x = seqs.input_ids[r].clone()  # (B, T)
        x[b, c] = mask_id
        mlm = torch.zeros_like(att)
        mlm[b, c] = True
        h = model.encode(
            x[:, :t].to(device), seqs.segment_ids[r, :t].to(device), att[:, :t].to(device), token_matrix=e
        )  # (B, t, D)
        logits = model.mlm(h[mlm[:, :t].to(device)], e).float()  # (B, N)
        if getattr(model, "mlm_cache", None) is not None:  # with the code cache (model.code_cache)
            logits = model.mlm_log_probs(
                logits, e, x[:, :t].to(device), att[:, :t].to(device), mlm[:, :t].to(device)
            )
        target = torch.as_tensor(probes.code[s : s + batch_size], device=logits.device)
        true = logits.gather(1, target[:, None])  # (B, 1)
        above = (logits > true).sum(1).double()
        ties = (logits == true).sum(1).double() - 1  # the true code itself excluded
        out[s : s + len(r)] = (above + ties / 2).cpu().numpy()
    model.train(was)
    return out


def patient_hits(probes: Probes, ranks: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """(patients, each patient's share of probes that are hits at ``k``), patients ascending.

    Shapes: ranks ``(Q,)``; outputs ``(P,)`` int64 and ``(P,)`` float64.
    """
    subjects, inverse = np.unique(probes.subject_id, return_inverse=True)
    hits = np.bincount(inverse, weights=(ranks < k).astype(np.float64), minlength=subjects.size)
    counts = np.bincount(inverse, minlength=subjects.size)
    return subjects, hits / np.maximum(counts, 1)


def neighbour_relatedness(
    matrix: torch.Tensor, ontology: Ontology, queries: np.ndarray, pool: np.ndarray, *, k: int = 4
) -> np.ndarray:
    """For each query, how many of its ``k`` nearest codes from ``pool`` are related to it.

    Shapes: matrix ``(N, D)``; queries ``(Q,)``; pool ``(M,)``; output ``(Q,)`` int64 in ``[0, k]``.
    """
    if queries.size == 0:
        return np.zeros(0, dtype=np.int64)
    outside = np.setdiff1d(np.arange(matrix.shape[0]), pool)
    nn_ids = nearest(matrix, [int(q) for q in queries], k, [int(i) for i in outside])  # (Q, K)
    return np.array(
        [sum(ontology.related(int(q), int(j)) for j in row) for q, row in zip(queries, nn_ids, strict=True)],
        dtype=np.int64,
    )


def has_twin(ontology: Ontology, rows: np.ndarray, among: np.ndarray) -> np.ndarray:
    """Whether each code of ``rows`` shares a SNOMED concept with another code of ``among``.

    Shapes: rows ``(Q,)``, among ``(M,)`` -> ``(Q,)`` bool.
    """
    count: dict[int, int] = {}
    for i in among.tolist():
        for c in ontology.snomed[i]:
            count[c] = count.get(c, 0) + 1
    members = set(among.tolist())
    return np.array(
        [
            any(count.get(c, 0) > (1 if int(i) in members else 0) for c in ontology.snomed[int(i)])
            for i in rows
        ],
        dtype=bool,
    )


def matched_sample(
    flags: np.ndarray, pool: np.ndarray, pool_flags: np.ndarray, rng: np.random.Generator
) -> np.ndarray:
    """Codes of ``pool`` drawn without replacement so that as many carry each flag value as ``flags`` has
    (fewer where the pool runs short), sorted.

    Shapes: flags ``(Q,)`` bool; pool, pool_flags ``(M,)`` -> ``(<= Q,)``.
    """
    out = []
    for value in (True, False):
        stratum = pool[pool_flags == value]
        n = min(int((flags == value).sum()), stratum.size)
        out.append(rng.choice(stratum, size=n, replace=False))
    return np.sort(np.concatenate(out))
