"""Evaluate a saved Doctor2Vec model and show why it chose doctors: :func:`evaluate_doctor2vec`.

Scores every (doctor, trial) pair of a split from the full patient histories, reports the ranking
metrics of :func:`pipelines.doctor2vec.train.ranking_metrics`, and prints, for one trial, the best-ranked
doctors with the patients their memory attended to most (and which of the trial's conditions each carries).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import torch

from pipelines.errors import PipelineError
from pipelines.train.runtime import resolve_device

from .tensors import D2VTensors, build_tensors, make_batch
from .train import _load, load_model, ranking_metrics, score_pairs


def evaluate_doctor2vec(
    run: str | Path,
    data: str | Path,
    program: str | Path,
    *,
    split: str = "test_rare",
    trial: int | None = None,
    top_doctors: int = 3,
    top_patients: int = 5,
    device: str = "cpu",
) -> tuple[dict[str, Any], str]:
    """Metrics of a saved model on ``split`` and, for one trial, the best-ranked doctors with the patients
    their memory attended to most (text). ``trial``: a trial id (default: the split's first trial with an
    enrolling doctor); ``device``: where the program and the model go (auto, cpu, cuda)."""
    dev = resolve_device(device)
    ds, prog = _load(str(data), str(program), dev)
    model, meta = load_model(run, ds.manifest, prog)
    model.to(dev)
    t = build_tensors(
        ds,
        max_memories=model.config.max_memories,
        max_codes=int(meta.get("max_codes", 64)),
        hide_held_out=False,
        seed=0,
    )
    rows = t.pairs_of(split)
    if not len(rows):
        raise PipelineError(f"{data}: split {split!r} has no pairs (splits: {sorted(set(t.trial_split))})")
    scores = score_pairs(model, t, rows, dev)
    report = ranking_metrics(t.trial_ids[t.pair_trial[rows]], t.pair_label[rows], scores, (5, 10))
    text = attention_text(model, ds, t, rows, scores, prog.concept_codes, trial, top_doctors, top_patients)
    return report, text


def attention_text(
    model, ds, t: D2VTensors, rows, scores, codes: list[str], trial, top_doctors, top_patients
) -> str:
    """For one trial: its text, then the top doctors by score, each with their most attended patients."""
    if trial is None:
        pos = rows[t.pair_label[rows]]
        trial_row = int(t.pair_trial[pos[0]] if len(pos) else t.pair_trial[rows[0]])
    else:
        hit = np.flatnonzero(t.trial_ids == int(trial))
        if not len(hit):
            raise PipelineError(f"trial {trial} is not in the data set")
        trial_row = int(hit[0])
    sel = t.pair_trial[rows] == trial_row
    mine, sc = rows[sel], scores[sel]
    if not len(mine):
        raise PipelineError(f"trial {int(t.trial_ids[trial_row])} has no pairs in this split")
    order = mine[np.argsort(-sc, kind="stable")][:top_doctors]
    tr = ds.trials.slice(trial_row, 1).to_pylist()[0]
    cond = set(tr["conditions"])
    family = set(tr.get("eligible_codes") or []) - cond  # eligible codes the trial does not list
    lines = [
        f"Trial {tr['trial_id']} ({tr['split']}{', rare disease' if t.trial_rare[trial_row] else ''}): "
        f"{tr['text']}",
        "Conditions: "
        + ", ".join(codes[c] for c in tr["conditions"] if 0 <= c < len(codes))
        + (f" (eligible: also {len(family)} unlisted codes of their category or concepts)" if family else ""),
    ]
    batch = make_batch(t, order, "eval")
    dev = next(model.parameters()).device  # the batch goes where the model is
    with torch.no_grad():
        logits, att = model({k: v.to(dev) for k, v in batch.items()})
    logits, att = logits.cpu(), att.cpu()  # read back here, beside the batch's patient rows
    patients = torch.unique(t.memory["eval"][torch.from_numpy(np.unique(t.pair_doctor[order]))])
    patients = patients[patients >= 0]
    for j, r in enumerate(order):
        d = int(t.pair_doctor[r])
        elig = int(t.pair_eligible[r])
        lines += [
            "",
            f"Doctor {int(t.doctor_ids[d])}: score {float(torch.sigmoid(logits[j])):.3f}, "
            f"label {int(t.pair_label[r])}, eligible patients {elig if elig >= 0 else 'n/a'}, "
            f"panel {int(t.panel_size[d])}",
        ]
        w = att[j]
        mem = batch["memory"][j]
        for i in torch.argsort(w, descending=True)[:top_patients].tolist():
            if int(mem[i]) < 0:
                continue
            prow = int(patients[int(mem[i])])
            pc = [c for c in t.codes["eval"][prow].tolist() if c]
            hits = [codes[c] for c in dict.fromkeys(pc) if c in cond]
            near = [codes[c] for c in dict.fromkeys(pc) if c in family]
            lines.append(
                f"  [{float(w[i]):.3f}] patient {int(t.subject_ids[prow])}: {len(pc)} codes"
                + (f", trial conditions {', '.join(hits)}" if hits else "")
                + (f", unlisted eligible codes {', '.join(near)}" if near else "")
            )
    return "\n".join(lines)
