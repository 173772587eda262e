"""The scoring half of ``hrrbert demo --carry`` (:mod:`pipelines.demo.carry_study`): carry the old
models of an experiment to the new program and score them on the new codes.

Every interval resamples units that are independent in the data: patients for the MLM probes (each
patient's probes averaged first) and for the chapters task, codes for the neighbours. Both models are
scored on the same patients and codes, so the difference base − unstructured has a paired interval.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch

from pipelines.eval.markdown import table
from pipelines.eval.stats import PatientScorer, bootstrap_patients, paired_bootstrap_diff

from .carry_study import CONFIGURATIONS, MLM_K, NEIGHBOURS, TASK, CarryStudy, write_study
from .release_model import ET1

__all__ = ["evaluate_carry"]

MLM_WIDE = 100  # a second, wider cut-off: new codes are rare, and no model ranks rare codes first
OLD_PROBES = 5000  # old-code MLM probes sampled in the same patients (the reference)
CONTROL, TREATED = CONFIGURATIONS  # unstructured, base


def _carry_all(exp_dir: Path, new_dir: Path, study: Path, init: str) -> dict[str, dict[str, Path]]:
    """Each configuration's pretrained and chapters models, carried to the new program."""
    from pipelines.eval.finetuned import trial_models
    from pipelines.ontology.carry import carry

    out: dict[str, dict[str, Path]] = {}
    for mode in CONFIGURATIONS:
        pre = exp_dir / "pretrain" / f"{mode}-seed0" / "model"
        fin = trial_models(exp_dir / "finetune" / f"{TASK}-{mode}-seed0")[0]
        out[mode] = {
            "pretrain": carry(pre, new_dir, study / "models" / f"{mode}-pretrain", init=init, force=True).out,
            TASK: carry(fin, new_dir, study / "models" / f"{mode}-{TASK}", init=init, force=True).out,
        }
    return out


def _mlm(models, ds, new_rows: np.ndarray, seed: int, device) -> dict[str, Any]:
    """Top-k of the new codes' probes (and of old-code probes in the same patients), per model."""
    from model import HRRBert
    from pipelines.ontology.newcodes import TOPK, Probes, mlm_probes, mlm_ranks, patient_hits

    first = HRRBert.from_pretrained(models[CONTROL]["pretrain"])
    mc = first.config
    seqs = ds.sequences("rood", max_len=mc.max_len, max_segments=mc.max_segments)
    probes = mlm_probes(seqs, new_rows)
    special = np.flatnonzero([v == "SPECIAL" for v in first.program.concept_vocabularies])
    old_rows = np.setdiff1d(np.arange(first.n_concepts), np.concatenate([new_rows, special]))
    allold = mlm_probes(seqs, old_rows)
    pick = np.sort(np.random.default_rng([seed, 17]).permutation(len(allold))[:OLD_PROBES])
    old = Probes(allold.row[pick], allold.col[pick], allold.code[pick], allold.subject_id[pick])
    out: dict[str, Any] = {
        "probes": len(probes),
        "patients": int(np.unique(probes.subject_id).size),
        "new_codes_probed": int(np.unique(probes.code).size),
        "old_probes": len(old),
    }
    per_patient: dict[str, np.ndarray] = {}
    for mode in CONFIGURATIONS:
        model = HRRBert.from_pretrained(models[mode]["pretrain"])
        ranks, old_ranks = (
            mlm_ranks(model, seqs, probes, device=device),
            mlm_ranks(model, seqs, old, device=device),
        )
        hits = {k: patient_hits(probes, ranks, k)[1] for k in TOPK}
        per_patient[mode] = hits
        n = hits[MLM_K].size
        out[mode] = {
            **{
                f"top{k}": bootstrap_patients(
                    lambda r, h=hits[k]: h[r].mean(-1), n, vectorized=True
                ).as_dict()
                for k in (MLM_K, MLM_WIDE)
            },
            **{f"top{k}_point": float(hits[k].mean()) for k in TOPK},
            f"old_codes_top{MLM_K}": float(patient_hits(old, old_ranks, MLM_K)[1].mean()),
            "median_rank": float(np.median(ranks)),
        }
    for k in (MLM_K, MLM_WIDE):
        a, b = per_patient[TREATED][k], per_patient[CONTROL][k]
        out[f"diff_top{k}"] = paired_bootstrap_diff(
            lambda r, a=a: a[r].mean(-1), lambda r, b=b: b[r].mean(-1), a.size, vectorized=True
        ).as_dict()
    return out


def _chapters(models, ds, new_rows: np.ndarray, device) -> dict[str, Any]:
    """Chapters F1 and AUROC on the rood patients whose history holds a new code."""
    from model import HRRBert
    from pipelines.eval.finetuned import subset
    from pipelines.ontology.newcodes import history_holds
    from pipelines.train.finetune import predict, read_thresholds

    scorers: dict[str, PatientScorer] = {}
    out: dict[str, Any] = {}
    for mode in CONFIGURATIONS:
        folder = models[mode][TASK]
        model = HRRBert.from_pretrained(folder)
        mc = model.config
        seqs = ds.sequences(
            "rood", max_len=mc.max_len, max_segments=mc.max_segments, task=TASK, before_last_visit=True
        )
        part = subset(seqs, history_holds(seqs, new_rows))
        probs, _ = predict(model, part, TASK, torch.device(device), 256)
        labels = part.labels.numpy()
        scorers[mode] = PatientScorer(labels, probs, read_thresholds(folder, TASK, labels.shape[1]))
        out["patients"] = len(part)
        out[mode] = {
            m: bootstrap_patients(scorers[mode].metric(m), len(part), vectorized=True).as_dict()
            for m in ("f1", "auroc")
        }
        out[mode]["predicts_constant"] = bool(scorers[mode].constant)
    out["diff"] = {
        m: paired_bootstrap_diff(
            scorers[TREATED].metric(m), scorers[CONTROL].metric(m), out["patients"], vectorized=True
        ).as_dict()
        for m in ("f1", "auroc")
    }
    return out


def _neighbours(models, new_dir: Path, new_rows: np.ndarray, seed: int) -> dict[str, Any]:
    """Share of the new codes' nearest codes that are related: among the codes the model trained with
    (``new``), and among every code of the new program, new ones included (``new_all``: new codes of one
    family sit next to each other); as many old codes among every code are the reference (``old``), and
    old codes with the new codes' share of twins the like-for-like one (``old_matched``,
    :func:`pipelines.ontology.newcodes.matched_sample`)."""
    from model import HRRBert
    from pipelines.eval.neighbours import Ontology
    from pipelines.ontology.newcodes import has_twin, matched_sample, neighbour_relatedness

    ont = Ontology(new_dir)
    mapped = np.array([bool(s) and v != "SPECIAL" for s, v in zip(ont.snomed, ont.vocabulary, strict=True)])
    queries = new_rows[mapped[new_rows]]
    everything = np.flatnonzero(mapped)
    pool = np.setdiff1d(everything, new_rows)
    ref = np.sort(
        np.random.default_rng([seed, 18]).choice(pool, size=min(queries.size, pool.size), replace=False)
    )
    twin = np.zeros(len(ont.snomed), dtype=bool)  # by row: shares a concept with another mapped code
    twin[everything] = has_twin(ont, everything, everything)
    matched = matched_sample(twin[queries], pool, twin[pool], np.random.default_rng([seed, 19]))
    out: dict[str, Any] = {
        "k": NEIGHBOURS,
        "new_codes": int(queries.size),
        "old_codes": int(ref.size),
        "new_with_twin": int(twin[queries].sum()),
        "matched_codes": int(matched.size),
    }
    for mode in CONFIGURATIONS:
        with torch.no_grad():
            matrix = HRRBert.from_pretrained(models[mode]["pretrain"]).token_matrix().detach()
        rec = {}
        for name, q, among in (
            ("new", queries, pool),
            ("new_all", queries, everything),
            ("old", ref, everything),
            ("old_matched", matched, everything),
        ):
            rel = neighbour_relatedness(matrix, ont, q, among, k=NEIGHBOURS) / NEIGHBOURS
            rec[name] = bootstrap_patients(
                lambda r, x=rel: x[r].mean(-1), rel.size, vectorized=True
            ).as_dict()
            rec[name]["method"] = rec[name]["method"].replace("patient", "code")
        out[mode] = rec
    return out


def _pct(iv: dict[str, Any] | None, scale: float = 100.0, signed: bool = False) -> str:
    if not iv or iv.get("estimate") is None:
        return "n/a"
    e, lo, hi = (iv.get(k) for k in ("estimate", "low", "high"))
    f = "{:+.1f}" if signed else "{:.1f}"
    if lo is None or hi is None:
        return f.format(scale * e)
    return f"{f.format(scale * e)} ({f.format(scale * lo)} to {f.format(scale * hi)})"


def _markdown(rec: dict[str, Any]) -> str:
    m, c, n = rec["mlm"], rec["chapters"], rec["neighbours"]
    rows = [
        [
            f"MLM top-{MLM_K} of new codes, % ({m['probes']} probes, {m['patients']} patients)",
            _pct(m[CONTROL][f"top{MLM_K}"]),
            _pct(m[TREATED][f"top{MLM_K}"]),
            _pct(m[f"diff_top{MLM_K}"], signed=True),
        ],
        [
            f"MLM top-{MLM_WIDE} of new codes, %",
            _pct(m[CONTROL][f"top{MLM_WIDE}"]),
            _pct(m[TREATED][f"top{MLM_WIDE}"]),
            _pct(m[f"diff_top{MLM_WIDE}"], signed=True),
        ],
        [
            f"MLM median rank of new codes (of {rec['new_tokens']} tokens; ties count half)",
            f"{m[CONTROL]['median_rank']:.0f}",
            f"{m[TREATED]['median_rank']:.0f}",
            "",
        ],
        [
            f"chapters F1 ×100, patients with a new code in their history ({c['patients']})",
            _pct(c[CONTROL]["f1"]),
            _pct(c[TREATED]["f1"]),
            _pct(c["diff"]["f1"], signed=True),
        ],
        [
            "chapters AUROC ×100",
            _pct(c[CONTROL]["auroc"]),
            _pct(c[TREATED]["auroc"]),
            _pct(c["diff"]["auroc"], signed=True),
        ],
        [
            f"neighbours related, new codes among the trained codes, % "
            f"(top {n['k']} of {n['new_codes']} codes)",
            _pct(n[CONTROL]["new"]),
            _pct(n[TREATED]["new"]),
            "",
        ],
        [
            "neighbours related, new codes among all codes, %",
            _pct(n[CONTROL]["new_all"]),
            _pct(n[TREATED]["new_all"]),
            "",
        ],
        [
            f"neighbours related, old codes among all codes (reference, {n['old_codes']} codes), %",
            _pct(n[CONTROL]["old"]),
            _pct(n[TREATED]["old"]),
            "",
        ],
        [
            f"neighbours related, old codes with the new codes' share of twins ({n['new_with_twin']} of "
            f"{n['new_codes']} new codes share a SNOMED concept with another code), among all codes, %",
            _pct(n[CONTROL]["old_matched"]),
            _pct(n[TREATED]["old_matched"]),
            "",
        ],
        [
            f"MLM top-{MLM_K} of old codes in the same patients, % (reference, {m['old_probes']} probes)",
            f"{100 * m[CONTROL][f'old_codes_top{MLM_K}']:.1f}",
            f"{100 * m[TREATED][f'old_codes_top{MLM_K}']:.1f}",
            "",
        ],
    ]
    t = rec["carry"][TREATED]["tokens"]
    tokens = (
        f"tokens carried {t['carried']}, new and composed from trained atoms only {t['composed_trained']}, "
        f"with some new atoms {t['composed_some_new']}, entirely new {t['entirely_new']}"
    )
    return "\n".join(
        [
            "## When a new release arrives: models carried to the new program",
            "",
            f"Old program `{rec['old_program_id']}` ({rec['old_as_of']}), "
            f"new program `{rec['new_program_id']}`: {rec['new_codes']} new codes. Both models were "
            "pretrained and fine-tuned on patients without any new code, then carried over "
            f"(`hrrbert carry`, init `{rec['init']}`): `unstructured` gives every new code the trained "
            "`[UNK]` row, `base` composes it from its trained atoms and relations "
            f"({tokens}).",
            "",
            table(
                [
                    "measure",
                    f"{CONTROL} (new codes at [UNK])",
                    f"{TREATED} (composed)",
                    f"{TREATED} − {CONTROL}",
                ],
                rows,
            ),
            "",
            "Intervals: 95 % percentile bootstrap over patients (MLM: each patient's probes averaged first; "
            "chapters), over codes (neighbours); differences are paired (same patients or codes). MLM ranks "
            "count tied scores half, so identical vectors for all new codes earn no credit from the tie. One "
            "pretraining seed and one fine-tuning trial per configuration.",
            "",
        ]
    )


def evaluate_carry(
    exp_dir: Path,
    new_dir: Path,
    dataset_new: Path,
    new_rows: np.ndarray,
    *,
    init: str = "parents",
    seed: int = 0,
    device: str = "cpu",
    show: Callable[[str], None] = print,
) -> CarryStudy:
    """Carry the experiment's models to ``new_dir``, score them on the new codes, write ``carry/``."""
    import json

    from hrr_kernel import load_program
    from pipelines.data.sequences import TokenizedDataset
    from pipelines.ontology.carry import REPORT_FILE

    t0 = time.perf_counter()
    study = Path(exp_dir) / "carry"
    models = _carry_all(Path(exp_dir), Path(new_dir), study, init)
    new_p = load_program(new_dir)
    ds = TokenizedDataset(dataset_new, new_p.program_id, new_p.n_concepts, pad_id=new_p.special_id("[PAD]"))
    old_id = json.loads((Path(exp_dir) / "experiment.json").read_text(encoding="utf-8"))["config"]["program"]
    rec: dict[str, Any] = {
        "kind": "carry_study",
        "experiment": str(exp_dir),
        "old_program_id": Path(old_id).name,
        "old_as_of": f"as of {ET1}",
        "new_program_id": new_p.program_id,
        "dataset_new": str(dataset_new),
        "new_codes": int(new_rows.size),
        "new_tokens": int(new_p.n_concepts),
        "init": init,
        "carry": {
            mode: json.loads((models[mode]["pretrain"] / REPORT_FILE).read_text(encoding="utf-8"))
            for mode in CONFIGURATIONS
        },
        "mlm": _mlm(models, ds, new_rows, seed, device),
        "chapters": _chapters(models, ds, new_rows, device),
        "neighbours": _neighbours(models, Path(new_dir), new_rows, seed),
    }
    rec["seconds"] = round(time.perf_counter() - t0, 1)
    md = _markdown(rec)
    write_study(study, rec, md)
    show(md)
    return CarryStudy(study, rec, md)
