"""The Doctor2Vec comparison of issue 9 and its Markdown report: :func:`compare`, :func:`write_report`.

Generates (or reuses) the Doctor2Vec data of a tokenized dataset, trains the grid — plain vs HRR code
embeddings x dynamic vs static doctor vectors (the paper's ablation), optionally the visit-Transformer
patient encoder — and writes ``<out>/report.md`` with the test trials and the rare-disease trials side
by side. Three untrained references score the same pairs: panel size (popularity), a rule (panel
patients carrying one of the trial's condition codes, what a SQL query over the panel would give) and
the generator's own driver (eligible patients: the ceiling, not a competitor). Differences between two
models are paired bootstrap intervals over the test trials' average precision. Each run keeps its own
folder under ``<out>/runs``; a run whose ``results.json`` exists is read back, so an interrupted
comparison resumes, and ``hrrbert report <out>`` rewrites the report from those files alone.
"""

from __future__ import annotations

import json
import logging
import math
import time
from pathlib import Path
from typing import Any

import numpy as np

from pipelines.errors import PipelineError
from pipelines.eval.markdown import cell, table
from pipelines.eval.report import EXPERIMENT_FILE, Report, report
from pipelines.eval.report import write_report as write_experiment_report
from pipelines.eval.stats import bootstrap_means

log = logging.getLogger(__name__)

COMPARE_FILE = "doctor2vec-compare.json"
REPORT_FILE = "report.md"
# run name -> train_doctor2vec options: every code embedding with the dynamic doctor, and the static ablation
GRID: dict[str, dict[str, Any]] = {
    "plain-dynamic": dict(embedding="plain", doctor="dynamic"),
    "hrr-base-dynamic": dict(embedding="hrr", hrr_mode="base", doctor="dynamic"),
    "hrr-add-dynamic": dict(embedding="hrr", hrr_mode="add", doctor="dynamic"),
    "hrr-cat-dynamic": dict(embedding="hrr", hrr_mode="cat", doctor="dynamic"),
    "plain-static": dict(embedding="plain", doctor="static"),
    "hrr-base-static": dict(embedding="hrr", hrr_mode="base", doctor="static"),
}
VISIT_GRID: dict[str, dict[str, Any]] = {
    "plain-dynamic-visits": dict(embedding="plain", doctor="dynamic", patient_encoder="visit-transformer"),
    "hrr-base-dynamic-visits": dict(embedding="hrr", hrr_mode="base", doctor="dynamic",
                                   patient_encoder="visit-transformer"),
}  # fmt: skip
SPLIT_TITLES = {
    "test": "Test trials (common conditions)",
    "test_rare": "Rare-disease trials (held-out codes)",
}
METRICS = ("pr_auc", "roc_auc", "p_at_5", "p_at_10", "trial_ap")
NAMES = {"pr_auc": "PR-AUC", "roc_auc": "ROC-AUC", "p_at_5": "P@5", "p_at_10": "P@10", "trial_ap": "AP/trial"}
CONTRASTS = (  # (a, b, what it shows): a - b
    ("hrr-base-dynamic", "plain-dynamic", "HRR base vs plain codes"),
    ("hrr-add-dynamic", "plain-dynamic", "HRR add vs plain codes"),
    ("hrr-cat-dynamic", "plain-dynamic", "HRR cat vs plain codes"),
    ("plain-dynamic", "plain-static", "dynamic vs static doctor (plain codes)"),
    ("hrr-base-dynamic", "hrr-base-static", "dynamic vs static doctor (HRR base codes)"),
    ("plain-dynamic-visits", "plain-dynamic", "visit Transformer vs pooled patients (plain codes)"),
    ("hrr-base-dynamic-visits", "hrr-base-dynamic", "visit Transformer vs pooled patients (HRR base codes)"),
)


def paired_difference(a: dict, b: dict, n_boot: int = 2000, seed: int = 0) -> dict[str, float]:
    """Mean difference of per-trial AP (a - b) over the trials both scored, with a bootstrap 95 % interval."""
    ta = dict(zip(a["trial"], a["ap"], strict=True))
    tb = dict(zip(b["trial"], b["ap"], strict=True))
    common = sorted(set(ta) & set(tb))
    d = np.array([ta[t] - tb[t] for t in common], dtype=np.float64)
    if not len(d):
        return {"diff": math.nan, "lo": math.nan, "hi": math.nan, "trials": 0, "p_better": math.nan}
    boots = bootstrap_means(d, n_boot=n_boot, seed=seed)
    lo, hi = np.quantile(boots, [0.025, 0.975])
    return {"diff": float(d.mean()), "lo": float(lo), "hi": float(hi), "trials": len(d),
            "p_better": float((boots > 0).mean())}  # fmt: skip


def reference_scores(ds) -> dict[str, dict[str, Any]]:
    """The untrained references on each evaluation split of ``ds`` (a read Doctor2Vec data set): panel
    size, condition-code rule, eligible count."""
    import torch

    from .tensors import build_tensors
    from .train import EVAL_SPLITS, ranking_metrics

    widest = max((len(p) for p in ds.doctors["panel"].to_pylist()), default=1)
    t = build_tensors(ds, max_memories=max(widest, 1), max_codes=10**6, hide_held_out=False, seed=0)
    codes, cond = t.codes["eval"], t.trials["conditions"]
    mem = t.memory["eval"].numpy()  # (Dn, M) every panel patient
    real = mem >= 0
    out: dict[str, dict[str, Any]] = {}
    for split in EVAL_SPLITS:
        rows = t.pairs_of(split)
        if not len(rows):
            continue
        rule = np.zeros(len(rows), dtype=np.float64)
        for tr in np.unique(t.pair_trial[rows]):
            c = cond[tr][cond[tr] != 0]
            carries = torch.isin(codes, c).any(1).numpy()  # (P,) patient carries a condition code
            per_doctor = (carries[np.where(real, mem, 0)] & real).sum(1)  # (Dn,)
            sel = t.pair_trial[rows] == tr
            rule[sel] = per_doctor[t.pair_doctor[rows][sel]]
        tid = t.trial_ids[t.pair_trial[rows]]
        y = t.pair_label[rows]
        ref = {
            "panel size": t.panel_size[t.pair_doctor[rows]].astype(np.float64),
            "rule: panel patients with a condition code": rule,
        }
        if (t.pair_eligible[rows] >= 0).all():
            ref["ceiling: eligible patients (generator's driver)"] = t.pair_eligible[rows].astype(np.float64)
        out[split] = {name: ranking_metrics(tid, y, s) for name, s in ref.items()}
    return out


def shared_hrr_codes(trials, program: str | Path) -> dict[str, float]:
    """Share of each evaluation split's listed condition codes (``trials``: the trials table) whose HRR
    vector (same edge set) is also the vector of a code outside that trial's conditions."""
    from hrr_kernel import load_program

    row = load_program(program).base.row_map.numpy()  # (N,) concept -> distinct HRR row
    size = np.bincount(row)  # codes per distinct row
    out = {}
    for split in SPLIT_TITLES:
        conds = [c for c, s in zip(trials["conditions"].to_pylist(), trials["split"].to_pylist(), strict=True)
                 if s == split]  # fmt: skip
        shared = [size[row[x]] > sum(row[y] == row[x] for y in c) for c in conds for x in c]
        out[split] = float(np.mean(shared)) if shared else math.nan
    return out


def compare(
    dataset: str | Path | None,
    program: str | Path,
    *,
    out: str | Path = "artifacts/runs/doctor2vec-compare",
    data: str | Path | None = None,
    epochs: int = 3,
    dim: int = 64,
    seeds: int = 1,
    visit_transformer: bool = False,
    threads: int | None = 1,
    data_options=None,
) -> Path:
    """Run the grid (``seeds`` trainings per configuration: seeds 0, 1, ...) and write ``<out>/report.md``.

    ``data``: an existing Doctor2Vec folder (else generated from ``dataset`` under ``<out>/data``).
    ``threads``: torch intra-op threads while it runs (1 by default: small models on a shared CPU run
    faster single-threaded)."""
    import torch

    if seeds < 1:
        raise ValueError(f"seeds must be >= 1, got {seeds}")
    before = torch.get_num_threads()
    if threads:
        torch.set_num_threads(threads)
    try:
        return _compare(
            dataset, program, Path(out), data, epochs, dim, seeds, visit_transformer, data_options
        )
    finally:
        torch.set_num_threads(before)


def _compare(dataset, program, out: Path, data, epochs, dim, seeds, visit_transformer, data_options) -> Path:
    from .data import generate_doctor2vec
    from .train import train_doctor2vec

    t0 = time.perf_counter()
    if data is None:
        if dataset is None:
            raise ValueError("give a tokenized dataset to generate the Doctor2Vec data from, or --data")
        data = generate_doctor2vec(dataset, program, out=out / "data", options=data_options).path
    runs = out / "runs"
    grid = {**GRID, **(VISIT_GRID if visit_transformer else {})}
    for name, opts in grid.items():
        for seed in range(seeds):
            if not (runs / f"{name}-seed{seed}" / "results.json").is_file():
                started = (runs / f"{name}-seed{seed}" / "config.json").is_file()  # killed: continue it
                train_doctor2vec(data, program, out=runs, run_id=f"{name}-seed{seed}", epochs=epochs, dim=dim,
                                 seed=seed, progress=False, resume=started, **opts)  # fmt: skip
                log.info("%s seed %d done", name, seed)
    spec = {"data": str(data), "program": str(program), "runs": list(grid), "seeds": seeds, "epochs": epochs,
            "dim": dim, "wall_s": time.perf_counter() - t0}  # fmt: skip
    out.mkdir(parents=True, exist_ok=True)
    (out / COMPARE_FILE).write_text(json.dumps(spec, indent=2) + "\n", encoding="utf-8")
    return write_report(out)


def _mean_sd(values: list[float]) -> str:
    x = np.array([v for v in values if v is not None and not math.isnan(v)], dtype=np.float64)
    if not len(x):
        return "n/a"
    return f"{x.mean():.3f}" if len(x) == 1 else f"{x.mean():.3f} ± {x.std(ddof=1):.3f}"


def _seed_mean_ap(per_seed: list[dict]) -> dict[str, list]:
    """Per-trial AP averaged over seeds (trials every seed scored)."""
    maps = [dict(zip(r["trial"], r["ap"], strict=True)) for r in per_seed]
    common = sorted(set.intersection(*(set(m) for m in maps))) if maps else []
    return {"trial": common, "ap": [float(np.mean([m[t] for m in maps])) for t in common]}


def write_report(root: str | Path) -> Path:
    """(Re)write ``report.md`` of a comparison folder from its ``doctor2vec-compare.json`` and run results."""
    from .read import read_doctor2vec

    root = Path(root)
    spec = json.loads((root / COMPARE_FILE).read_text(encoding="utf-8"))
    results = _read_results(root, spec)
    data = Path(spec["data"])
    ds = read_doctor2vec(data)
    parts = _introduction(spec, ds.manifest, results)
    parts += _result_tables(results, reference_scores(ds), spec)
    parts += _paired_differences(results)
    parts += _hrr_sharing(shared_hrr_codes(ds.trials, spec["program"]))
    parts += _rare_trial_explanation(root, results, data, spec["program"])
    parts += [
        "",
        f"Total wall time: {spec['wall_s']:.0f} s on this machine (runs already present are reused).",
    ]
    path = root / REPORT_FILE
    path.write_text("\n".join(parts) + "\n", encoding="utf-8")
    return path


def _read_results(root: Path, spec: dict[str, Any]) -> dict[str, list[dict]]:
    """Run name -> the ``results.json`` of each seed; raises when one is missing."""
    seeds = int(spec.get("seeds", 1))
    results: dict[str, list[dict]] = {}
    for n in spec["runs"]:
        files = [root / "runs" / f"{n}-seed{k}" / "results.json" for k in range(seeds)]
        missing = [str(f) for f in files if not f.is_file()]
        if missing:
            raise PipelineError(
                f"{root}: missing run results {missing[:3]}; run `hrrbert doctor2vec compare` again"
            )
        results[n] = [json.loads(f.read_text(encoding="utf-8")) for f in files]
    return results


def _introduction(
    spec: dict[str, Any], manifest: dict[str, Any], results: dict[str, list[dict]]
) -> list[str]:
    """The title and the paragraph on the data, the training and the metrics."""
    seeds = int(spec.get("seeds", 1))
    first_run = results[spec["runs"][0]][0]
    return [
        "# Doctor2Vec on HRR code embeddings: matching doctors to clinical trials (issue 9)",
        "",
        f"Data `{Path(spec['data'])}` (program `{manifest['program_id']}`, dataset `{manifest.get('source_dataset_id')}`): "
        f"{_counts_line(manifest.get('counts', {}))}. Each doctor's memory holds up to "
        f"{first_run['config']['max_memories']} of their patients; a trial (conditions, "
        "exclusions, age band, sex, category, text) reads each patient's codes, then the memory. "
        f"{_criteria_line(manifest)} Every code that makes a patient eligible for a rare-disease trial is "
        "removed from every patient history during training, so those codes are first seen at test time. "
        f"Training: {spec['epochs']} epochs, D = {spec['dim']}, validation "
        f"every 10 steps, the best validation PR-AUC kept; {seeds} seed(s) per configuration"
        f"{' (mean ± sd)' if seeds > 1 else ''}. Metrics: PR-AUC / ROC-AUC pooled over the split's "
        "doctor-trial pairs; P@k and AP/trial rank the doctors of each trial (mean over trials with an "
        "enrolling doctor). `params` counts the trained parameters; `wall s` is one training.",
    ]


def _result_tables(results: dict[str, list[dict]], refs: dict[str, dict], spec: dict[str, Any]) -> list[str]:
    """One table per split (test, test_rare): every run (mean ± sd over seeds) and the references."""
    parts: list[str] = []
    for split, title in SPLIT_TITLES.items():
        rows = []
        for n, rs in results.items():
            if all(split in r for r in rs):
                cfg = rs[0]["config"]
                codes = cfg["embedding"] + (f" {cfg['hrr_mode']}" if cfg["embedding"] == "hrr" else "")
                rows.append([n, codes, cfg["doctor"], cfg["patient_encoder"], f"{rs[0]['parameters']:,}",
                             *[_mean_sd([r[split][k] for r in rs]) for k in METRICS],
                             f"{np.mean([r['wall_s'] for r in rs]):.0f}"])  # fmt: skip
        for name, m in refs.get(split, {}).items():
            rows.append([name, "-", "-", "-", "0", *[m[k] for k in METRICS], "-"])
        if rows:
            anyr = next(iter(refs.get(split, {}).values()), None) or results[spec["runs"][0]][0][split]
            parts += ["", f"## {title}", "",
                      f"{anyr['trials']} trials, {anyr['pairs']:,} pairs, {anyr['positives']:,} enrolling.", "",
                      table(["run", "codes", "doctor", "patients", "params", *[NAMES[k] for k in METRICS],
                              "wall s"], rows)]  # fmt: skip
    return parts


def _paired_differences(results: dict[str, list[dict]]) -> list[str]:
    """The :data:`CONTRASTS` as paired bootstrap differences of the per-trial AP (nothing without a pair)."""
    diffs = []
    for a, b, what in CONTRASTS:
        if a in results and b in results:
            for split in SPLIT_TITLES:
                if all(split in r for r in results[a] + results[b]):
                    d = paired_difference(_seed_mean_ap([r[split]["per_trial_ap"] for r in results[a]]),
                                          _seed_mean_ap([r[split]["per_trial_ap"] for r in results[b]]))  # fmt: skip
                    diffs.append([what, split, d["diff"], f"{cell(d['lo'])} .. {cell(d['hi'])}", d["p_better"],
                                  d["trials"]])  # fmt: skip
    if not diffs:
        return []
    return ["", "## Paired differences (AP per trial, a - b)", "",
            "Per-trial average precision (averaged over the seeds), bootstrapped over the trials (2,000 "
            "resamples); `P(a > b)` is the share of resamples with a positive mean difference. The "
            "intervals cover trial sampling, not training noise (see the ± above).", "",
            table(["contrast", "split", "mean diff", "95 % interval", "P(a > b)", "trials"], diffs)]  # fmt: skip


def _hrr_sharing(shared: dict[str, float]) -> list[str]:
    """The paragraph on condition codes sharing their HRR ``base`` vector (:func:`shared_hrr_codes`)."""
    return ["", "How HRR `base` differs from a plain table here: every code whose program edges equal another "
            "code's gets the same `base` vector (codes mapped to one SNOMED concept: an ICD-9 code and its "
            "ICD-10 equivalent, codes that differ only in an encounter character). Of the listed condition "
            "codes, " + ", ".join(f"{100 * v:.0f} % ({k})" for k, v in shared.items())
            + " share their `base` vector with a code the trial does not list. With criteria on standard "
            "concepts those codes are eligible too, which `base` knows from the ontology while a plain table "
            "has to learn it (and cannot for codes unseen in training); with exact-code criteria "
            "(`generate --criteria listed`) the same sharing keeps `base` from telling eligible codes from "
            "ineligible ones. `add` and `cat` give every code a free part as well."]  # fmt: skip


def _rare_trial_explanation(
    root: Path, results: dict[str, list[dict]], data: Path, program: str
) -> list[str]:
    """Which patients made a doctor fit a rare-disease trial, for the first HRR (else plain) dynamic run."""
    from .evaluate import evaluate_doctor2vec

    show = next((n for n in ("hrr-base-dynamic", "hrr-add-dynamic", "plain-dynamic") if n in results), None)
    if not show:
        return []
    _, text = evaluate_doctor2vec(root / "runs" / f"{show}-seed0", data, program, split="test_rare")
    return ["", f"## Which patients made a doctor fit a rare-disease trial ({show}, seed 0)", "", "```", text,
            "```"]  # fmt: skip


def _criteria_line(manifest: dict[str, Any]) -> str:
    o = manifest.get("options") or {}
    if o.get("criteria") == "category":
        also = (
            (
                " or with a code of either ICD version mapped to the same SNOMED concept(s) as one of them "
                "(criteria on standard concepts, as OMOP cohort definitions)"
            )
            if o.get("equivalents")
            else ""
        )
        return (f"Trials list up to {o.get('listed_max')} codes of a condition's ICD category; a patient is "
                f"eligible with any of up to {o.get('max_family')} codes of that category{also}, so the rule "
                "below misses the unlisted ones.")  # fmt: skip
    return "A patient is eligible with one of the codes a trial lists."


def _counts_line(c: dict[str, Any]) -> str:
    bits = []
    for key in ("doctors", "patients"):
        if key in c:
            bits.append(f"{c[key]:,} {key}")
    trials = c.get("trials")
    if isinstance(trials, dict):
        bits.append("trials " + ", ".join(f"{k} {v}" for k, v in trials.items()))
    return "; ".join(bits) if bits else "counts not recorded"


def comparison_report(root: Path) -> Report:
    """:func:`write_report` as a :class:`pipelines.eval.report.Report` (its headline: the two result tables)."""
    path = write_report(root)
    tables = [b for b in path.read_text(encoding="utf-8").split("\n\n") if b.startswith("| run")]
    return Report(path, "\n\n".join(tables[:2]))


def report_any(runs_dir: str | Path) -> list[Report]:
    """Reports of experiments and Doctor2Vec comparisons in ``runs_dir`` (``hrrbert report``)."""
    return report(runs_dir, kinds={EXPERIMENT_FILE: write_experiment_report, COMPARE_FILE: comparison_report})
