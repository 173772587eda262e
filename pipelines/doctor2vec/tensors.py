"""Doctor2Vec data as tensors: patients, doctor memories, trials and pairs, and batches grouped by doctor.

:func:`build_tensors` turns a validated Doctor2Vec folder (:func:`pipelines.doctor2vec.data.read_doctor2vec`)
into :class:`D2VTensors`. Two views of the patients exist: ``eval`` (every code) and ``train`` (the
held-out codes of the rare-disease trials removed, so they are never seen in training; a patient left
with no code drops out of the training memories). Each doctor's memory holds at most ``max_memories``
patients (a fixed seeded sample when the panel is larger; counted). Batches group pairs by doctor: a
step takes a few doctors and the trials of the split, so each patient is encoded once per step.

Dimension legend: P patients, T codes per patient, Dn doctors, M memory slots, Tr trials, K condition
codes, X excluded codes, W words, B pairs in a batch.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import torch
from torch import Tensor

SEX_INDEX = {"any": 0, "F": 1, "M": 2}  # model.doctor2vec.SEXES


def pad_lists(column: pa.ChunkedArray | pa.Array, width: int | None = None, keep: str = "first") -> Tensor:
    """A list<int> column -> ``(rows, width)`` int64, zero-padded; longer lists keep their first or last
    items."""
    arr = column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
    offsets = arr.offsets.to_numpy()
    values = arr.flatten().to_numpy(zero_copy_only=False).astype(np.int64)
    lengths = np.diff(offsets)
    longest = max(int(lengths.max(initial=0)), 1)
    w = int(min(width, longest) if width is not None else longest)
    n = len(lengths)
    out = np.zeros((n, w), dtype=np.int64)
    take = np.minimum(lengths, w)
    start = offsets[:-1] + (lengths - take if keep == "last" else 0)
    rows = np.repeat(np.arange(n), take)
    cols = np.arange(int(take.sum())) - np.repeat(np.cumsum(take) - take, take)
    src = np.repeat(start, take) + cols
    out[rows, cols] = values[src]
    return torch.from_numpy(out)


def left_pack(codes: Tensor, segments: Tensor) -> tuple[Tensor, Tensor]:
    """Move the non-zero codes of each row to the front (order kept). ``(P, T)`` each."""
    keep = codes != 0
    order = torch.sort((~keep).to(torch.int8), dim=1, stable=True).indices  # (P, T)
    c, s = codes.gather(1, order), segments.gather(1, order)
    return c, torch.where(c != 0, s, torch.zeros_like(s))


@dataclass
class D2VTensors:
    """Everything a training or evaluation loop needs, on CPU."""

    codes: dict[str, Tensor]  # view ('train' | 'eval') -> (P, T) concept ids, 0 = padding
    segments: dict[str, Tensor]  # view -> (P, T) visit index
    age: Tensor  # (P,) float years, NaN = unknown
    sex: Tensor  # (P,) index into SEX_INDEX (0 = unknown)
    memory: dict[str, Tensor]  # view -> (Dn, M) patient rows, -1 = empty
    trials: dict[str, Tensor]  # field -> (Tr, ...) in trial-row order
    trial_split: np.ndarray  # (Tr,) split name
    trial_rare: np.ndarray  # (Tr,) bool
    pair_doctor: np.ndarray  # (Np,) doctor row
    pair_trial: np.ndarray  # (Np,) trial row
    pair_label: np.ndarray  # (Np,) bool
    pair_eligible: np.ndarray  # (Np,) int ground truth (-1 when the data has none)
    doctor_ids: np.ndarray  # (Dn,) doctor_id per row
    trial_ids: np.ndarray  # (Tr,) trial_id per row
    subject_ids: np.ndarray  # (P,) subject_id per row
    panel_size: np.ndarray  # (Dn,) patients in the panel (before truncation to M)
    counts: dict[str, int] = field(default_factory=dict)  # truncations and drops

    def pairs_of(self, split: str) -> np.ndarray:
        """Pair rows whose trial is in ``split``."""
        return np.flatnonzero(self.trial_split[self.pair_trial] == split)


def _unseen_words(vocab: pa.Table) -> Tensor:
    """Word ids that occur in no train trial's text (vocab ``in_train`` False); they read as [UNK] (id 1)."""
    if "in_train" not in vocab.column_names:
        return torch.zeros(0, dtype=torch.int64)
    flag = vocab["in_train"].to_pylist()
    ids = vocab["token_id"].to_pylist()
    return torch.tensor(
        [i for i, f in zip(ids, flag, strict=True) if f is False and i > 1], dtype=torch.int64
    )


def _trial_tensors(trials: pa.Table, unseen_words: Tensor) -> dict[str, Tensor]:
    cond = pad_lists(trials["conditions"])
    excl, text = trials["excluded"], trials["text_ids"]
    x = pad_lists(excl) if pc.max(pc.list_value_length(excl)).as_py() else torch.zeros(len(trials), 0)
    w = pad_lists(text).long() if pc.max(pc.list_value_length(text)).as_py() else torch.zeros(len(trials), 0)
    if unseen_words.numel() and w.numel():
        w = w.masked_fill(torch.isin(w, unseen_words), 1)  # words no train trial used: [UNK]
    age = np.stack([trials["age_min"].to_numpy(), trials["age_max"].to_numpy()], 1).astype(np.float32)
    sex = np.array([SEX_INDEX.get(s, 0) for s in trials["sex"].to_pylist()], dtype=np.int64)
    cat = np.nan_to_num(trials["category"].to_numpy(zero_copy_only=False).astype(np.float64), nan=0.0)
    return {
        "conditions": cond,
        "excluded": x.long(),
        "text": w.long(),
        "age_band": torch.from_numpy(age),
        "sex": torch.from_numpy(sex),
        "category": torch.from_numpy(cat.astype(np.int64)),
    }


def _memories(
    panels: list[list[int]], row_of: dict[int, int], usable: np.ndarray, m: int, seed: int
) -> tuple[Tensor, int]:
    """(Dn, M) memory rows of each doctor (usable patients only); panels over M are sampled (seeded)."""
    rng = np.random.default_rng(seed)
    out = np.full((len(panels), m), -1, dtype=np.int64)
    truncated = 0
    for d, panel in enumerate(panels):
        rows = np.array([row_of[s] for s in panel], dtype=np.int64)
        rows = rows[usable[rows]]
        if len(rows) > m:
            truncated += 1
            rows = np.sort(rng.choice(rows, size=m, replace=False))
        out[d, : len(rows)] = rows
    return torch.from_numpy(out), truncated


def build_tensors(data, *, max_memories: int, max_codes: int, hide_held_out: bool, seed: int) -> D2VTensors:
    """Tensors of a validated Doctor2Vec data set (``data``: :class:`pipelines.doctor2vec.data.D2VData`)."""
    pt = data.patients
    codes = pad_lists(pt["input_ids"], max_codes, keep="last")  # (P, T), most recent codes
    segs = pad_lists(pt["segment_ids"], max_codes, keep="last")  # (P, T)
    held = torch.as_tensor(sorted(data.manifest.get("held_out_codes", [])), dtype=torch.int64)
    if hide_held_out and held.numel():
        train_codes, train_segs = left_pack(codes.masked_fill(torch.isin(codes, held), 0), segs)
    else:
        train_codes, train_segs = codes, segs
    age_col = (
        pt["age"].to_numpy(zero_copy_only=False).astype(np.float64) if "age" in pt.column_names else None
    )
    p = pt.num_rows
    age = age_col if age_col is not None else np.full(p, np.nan)
    sex_list = pt["sex"].to_pylist() if "sex" in pt.column_names else [None] * p
    sex = np.array([SEX_INDEX.get(s or "any", 0) for s in sex_list], dtype=np.int64)
    subject_ids = pt["subject_id"].to_numpy()
    row_of = {int(s): i for i, s in enumerate(subject_ids)}
    panels = data.doctors["panel"].to_pylist()
    mem_eval, truncated = _memories(panels, row_of, (codes != 0).any(1).numpy(), max_memories, seed)
    usable_train = (train_codes != 0).any(1).numpy()
    mem_train, _ = _memories(panels, row_of, usable_train, max_memories, seed)
    doctor_ids = data.doctors["doctor_id"].to_numpy()
    trial_ids = data.trials["trial_id"].to_numpy()
    d_row = {int(d): i for i, d in enumerate(doctor_ids)}
    t_row = {int(t): i for i, t in enumerate(trial_ids)}
    pairs = data.pairs
    eligible = (
        pairs["eligible"].fill_null(-1).to_numpy()
        if "eligible" in pairs.column_names
        else np.full(pairs.num_rows, -1)
    )
    rare = data.trials["rare"].to_numpy(zero_copy_only=False) if "rare" in data.trials.column_names else None
    split = np.asarray(data.trials["split"].to_pylist(), dtype=object)
    return D2VTensors(
        codes={"train": train_codes, "eval": codes},
        segments={"train": train_segs, "eval": segs},
        age=torch.from_numpy(age.astype(np.float32)),
        sex=torch.from_numpy(sex),
        memory={"train": mem_train, "eval": mem_eval},
        trials=_trial_tensors(data.trials, _unseen_words(data.vocab)),
        trial_split=split,
        trial_rare=np.asarray(rare if rare is not None else split == "test_rare", dtype=bool),
        pair_doctor=np.array([d_row[int(d)] for d in pairs["doctor_id"].to_numpy()], dtype=np.int64),
        pair_trial=np.array([t_row[int(t)] for t in pairs["trial_id"].to_numpy()], dtype=np.int64),
        pair_label=pairs["label"].to_numpy(zero_copy_only=False).astype(bool),
        pair_eligible=np.asarray(eligible, dtype=np.int64),
        doctor_ids=doctor_ids,
        trial_ids=trial_ids,
        subject_ids=subject_ids,
        panel_size=np.array([len(x) for x in panels], dtype=np.int64),
        counts={
            "doctors_memory_truncated": truncated,
            "patients_without_codes_in_training": int((~usable_train).sum()),
            "held_out_codes": int(held.numel()),
        },
    )


def make_batch(t: D2VTensors, rows: np.ndarray, view: str) -> dict[str, Tensor]:
    """The model's input for pair ``rows``: distinct patients once, memories as indices into them."""
    doctors = t.pair_doctor[rows]
    mem_all = t.memory[view]
    uniq_d, d_inv = np.unique(doctors, return_inverse=True)
    mem = mem_all[torch.from_numpy(uniq_d)]  # (Du, M)
    m = max(int((mem >= 0).sum(1).max()), 1)
    mem = mem[:, :m]
    patients = torch.unique(mem[mem >= 0])  # (P,)
    local = torch.full((len(t.subject_ids),), -1, dtype=torch.int64)
    local[patients] = torch.arange(len(patients))
    mem_local = torch.where(mem >= 0, local[mem.clamp(min=0)], mem)  # (Du, M)
    codes = t.codes[view][patients]
    width = max(int((codes != 0).sum(1).max()), 1)
    uniq_t, t_inv = np.unique(t.pair_trial[rows], return_inverse=True)
    batch = {
        "patient_codes": codes[:, :width],
        "patient_segments": t.segments[view][patients][:, :width],
        "patient_age": t.age[patients],
        "patient_sex": t.sex[patients],
        "memory": mem_local[torch.from_numpy(d_inv)],  # (B, M)
        "label": torch.from_numpy(t.pair_label[rows]),
    }
    batch["pair_trial"] = torch.from_numpy(t_inv.astype(np.int64))  # (B,) into the distinct trials
    for k, v in t.trials.items():
        batch[k] = v[torch.from_numpy(uniq_t)]  # (U, ...)
    return batch


def doctor_batches(t: D2VTensors, rows: np.ndarray, doctors_per_batch: int, rng=None) -> list[np.ndarray]:
    """Pair rows grouped by doctor, ``doctors_per_batch`` doctors a batch (shuffled when ``rng`` is given)."""
    doctors = np.unique(t.pair_doctor[rows])
    if rng is not None:
        doctors = rng.permutation(doctors)
    order = np.argsort(t.pair_doctor[rows], kind="stable")
    sorted_rows, sorted_d = rows[order], t.pair_doctor[rows][order]
    starts = np.searchsorted(sorted_d, doctors)
    ends = np.searchsorted(sorted_d, doctors, side="right")
    out = []
    for i in range(0, len(doctors), doctors_per_batch):
        out.append(
            np.concatenate(
                [
                    sorted_rows[s:e]
                    for s, e in zip(
                        starts[i : i + doctors_per_batch], ends[i : i + doctors_per_batch], strict=True
                    )
                ]
            )
        )
    return out
