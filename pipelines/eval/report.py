"""The Markdown report of an experiment: :func:`write_report` / :func:`report` (``hrrbert report``).

Reads only the files an experiment wrote (:mod:`pipelines.eval.gather`) and writes ``report.md``,
``results.json`` (the headline numbers with their intervals, methods and baselines) and ``plots/``
beside them. Every model row is read against the baselines (constant, logistic regressions on the codes and
on the history's chapters, the ground-truth ceiling; the MLM baselines) shown beside it.

Intervals (every caption names its method; :mod:`pipelines.eval.values`): one pretraining seed, a patient
bootstrap (test patients resampled, a model's fine-tuning trials averaged on each resample); several seeds,
a Student-t interval over seeds; configurations are compared over seeds (paired t, Welch, or Dunnett);
the ROOD difference of a configuration and the control is a paired patient bootstrap on the same patients.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pipelines.errors import PipelineError
from pipelines.train.runtime import write_json

from . import values as V
from .gather import BASELINE_MODELS, EXPERIMENT_FILE, Experiment, load_experiment
from .markdown import table
from .stats import Interval, bootstrap_method, compare_over_seeds, fisher

__all__ = ["EXPERIMENT_FILE", "REPORT_FILE", "RESULTS_FILE", "Report", "report", "write_report", "headline"]

log = logging.getLogger(__name__)

REPORT_FILE = "report.md"
RESULTS_FILE = "results.json"
RESULTS_SCHEMA = 1
CLS_METRICS = ("accuracy", "precision", "recall", "f1", "auroc")
NAMES = {"accuracy": "acc", "precision": "prec", "recall": "rec", "f1": "F1", "auroc": "AUROC",
         "val_mlm_acc": "MLM top-1", "val_top10": "top-10", "val_top100": "top-100"}  # fmt: skip
MLM_KEYS = (
    ("val_mlm_acc", "top1"),
    ("val_top10", "top10"),
    ("val_top100", "top100"),
)  # run key, baseline key
BASELINE_NAMES = {"constant": "constant", "logistic_regression": "logistic regression",
                  "history_chapters": "history's chapters regression", "ceiling": "ground-truth ceiling"}  # fmt: skip
MLM_BASELINE_NAMES = {"most_frequent": "most frequent code", "copy_from_history": "copy from history",
                      "cooccurrence": "co-occurrence"}  # fmt: skip
GROUPS = ("case_studies", "common", "rare", "random")
ONE_SEED = bootstrap_method()
OVER_SEEDS = "mean over pretraining seeds with a Student-t 95 % interval over seeds"
INTERVALS = (f"one pretraining seed: {ONE_SEED} of the held-out patients, each model the mean over its "
             f"fine-tuning trials on every resample; several seeds: {OVER_SEEDS}")  # fmt: skip
SYNTHETIC = (
    "**This is a synthetic (demo) run.** The synthetic ground truth ties outcomes to the ontology: the "
    "conditions' ontology attributes drive the outcomes, and reserved codes are used only by flagged "
    "patients. The demo therefore shows that the method *can use* ontology structure when outcomes follow "
    "it; whether real outcomes do is answered only by `hrrbert experiment` on MIMIC-IV/eICU."
)
TASK_SECTIONS = (("mortality", "test", "Mortality within 6 months (test)"),
                 ("chapters", "test", "Disease chapters, multi-label (test; macro over chapters)"),
                 ("mortality", "transfer", "eICU-layout transfer of the mortality models (test)"))  # fmt: skip


@dataclass
class Report:
    path: Path
    headline: str  # the headline table and its caption (Markdown)
    results: Path | None = None  # results.json


def report(runs_dir: str | Path, kinds: dict[str, Callable[[Path], Report]] | None = None) -> list[Report]:
    """Write the report of the run folder ``runs_dir``, or of every such folder directly under it.

    ``kinds`` maps the file that marks a kind of run folder to the function that writes its report
    (default: experiments, ``experiment.json`` -> :func:`write_report`); rooms built on top of this one
    (Doctor2Vec comparisons) add theirs.
    """
    kinds = kinds or {EXPERIMENT_FILE: write_report}
    d = Path(runs_dir)
    for marker, write in kinds.items():
        if (d / marker).is_file():
            return [write(d)]
    found = [(p.parent, write) for marker, write in kinds.items() for p in sorted(d.glob(f"*/{marker}"))]
    if not found:
        raise PipelineError(
            f"{d}: no {' or '.join(kinds)} here or in its sub-folders; run `hrrbert experiment` "
            "(or `hrrbert doctor2vec compare`) first"
        )
    return [write(p) for p, write in found]


# ----------------------------------------------------------------------------- cells


def _pct(iv: Interval | None, signed: bool = False) -> str:
    """``61.0 (60.0–62.0)`` in %; the reason instead of the bounds when there are none or no spread."""
    if iv is None or not math.isfinite(iv.estimate):
        return "–"
    f = "{:+.1f}" if signed else "{:.1f}"
    est = f.format(100 * iv.estimate)
    if iv.note == V.CONSTANT:
        return f"{est} (predicts a constant)"
    if iv.note == V.NO_PREDICTIONS:
        return f"{est}*"
    extra = f"; {iv.note}" if iv.note and "trials predict a constant" in iv.note else ""
    if not (math.isfinite(iv.low) and math.isfinite(iv.high)):
        return est + (f" ({iv.note})" if extra else "")
    if iv.high - iv.low == 0:
        return f"{est} (same on every resample{extra})"
    sep = " to " if signed else "–"
    return f"{est} ({f.format(100 * iv.low)}{sep}{f.format(100 * iv.high)}{extra})"


def _p(x: Any) -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "–"
    return f"{x:.3g}" if x >= 1e-15 else "<1e-15"


def _d(iv: Interval | None) -> dict | None:
    return iv.as_dict() if iv is not None else None


# ----------------------------------------------------------------------------- headline


def _headline_values(exp: Experiment) -> dict[str, Any]:
    """results.json's ``configurations`` and ``baselines`` parts (Interval objects, not yet dicts)."""
    confs, b, j = exp.configurations, exp.baselines, V.rarest_bin(exp.configurations)
    out: dict[str, Any] = {"configurations": {}, "baselines": {}, "rarest_bin": j}
    for k, runs in confs.items():
        diff = V.diff_intervals(exp, k) if k != exp.control else ({}, None)
        rel, tot = V.rare_neighbours(runs)
        out["configurations"][k] = {
            "seeds": [r.seed for r in runs],
            "mlm_top1": V.mlm_interval(runs, "val_mlm_acc"),
            "chapters_f1": V.conf_interval(runs, "chapters", "test", "f1"),
            "mortality_auroc": V.conf_interval(runs, "mortality", "test", "auroc"),
            "rood_unseen_chapters_f1": V.conf_interval(runs, "chapters", "rood_unseen", "f1"),
            "rood_unseen_f1_minus_control": diff[1] or next(iter(diff[0].values()), None),
            "rare_neighbours": {"related": rel, "total": tot} if tot else None,
            "rarest_bin_top100": V.bin_interval(runs, j) if j is not None else None,
            "rarest_bin_median_rank": V.bin_median_rank(runs, j) if j is not None else None,
            "transfer_mortality_auroc": V.conf_interval(runs, "mortality", "transfer", "auroc"),
        }
    for m in BASELINE_MODELS:
        row = {"chapters_f1": V.baseline_interval(b, m, "chapters", "test", "f1"),
               "mortality_auroc": V.baseline_interval(b, m, "mortality", "test", "auroc"),
               "rood_unseen_chapters_f1": V.baseline_interval(b, m, "chapters", "rood_unseen", "f1"),
               "transfer_mortality_auroc": V.baseline_interval(b, m, "mortality", "transfer", "auroc")}  # fmt: skip
        if any(v is not None for v in row.values()):
            out["baselines"][m] = row
    mlm = b.mlm_top1 if b is not None else {}
    if mlm:
        best = max(mlm, key=mlm.get)
        out["baselines"]["mlm"] = {"top1": mlm, "best": best, "best_top1": mlm[best]}
    return out


def _headline_table(exp: Experiment, hv: dict[str, Any]) -> str:
    j = hv["rarest_bin"]
    bin_name = "rarest bin"
    for runs in exp.configurations.values():
        bins = runs[0].evaluation.get("frequency_bins") or [] if runs else []
        if j is not None and j < len(bins):
            bin_name = f"bin [{bins[j]['low']:.0f}, {bins[j]['high']:.0f})"
            break
    header = ["model", "seeds", "MLM top-1", "chapters macro-F1", "mortality AUROC", "ROOD-unseen chapters F1",
              f"unseen F1 − {exp.control}", "rare-code neighbours related", f"top-100, {bin_name}",
              "eICU transfer AUROC"]  # fmt: skip
    rows = []
    for k, v in hv["configurations"].items():
        nb = v["rare_neighbours"]
        rows.append([k, str(len(v["seeds"])), _pct(v["mlm_top1"]), _pct(v["chapters_f1"]),
                     _pct(v["mortality_auroc"]), _pct(v["rood_unseen_chapters_f1"]),
                     _pct(v["rood_unseen_f1_minus_control"], signed=True) if k != exp.control else "(control)",
                     f"{nb['related']}/{nb['total']}" if nb else "–", _pct(v["rarest_bin_top100"]),
                     _pct(v["transfer_mortality_auroc"])])  # fmt: skip
    mlm = hv["baselines"].get("mlm")
    if mlm:
        name = MLM_BASELINE_NAMES.get(mlm["best"], mlm["best"])
        rows.append([f"best MLM baseline ({name})", "–", f"{100 * mlm['best_top1']:.1f}"] + ["–"] * 7)
    for m, v in hv["baselines"].items():
        if m == "mlm":
            continue
        rows.append([f"baseline: {BASELINE_NAMES.get(m, m)}", "–", "–", _pct(v["chapters_f1"]),
                     _pct(v["mortality_auroc"]), _pct(v["rood_unseen_chapters_f1"]), "–", "–", "–",
                     _pct(v["transfer_mortality_auroc"])])  # fmt: skip
    return table(header, rows)


def headline_caption(exp: Experiment) -> str:
    seeds = {len(r) for r in exp.configurations.values()}
    how = f"Cells in %, interval in parentheses: {INTERVALS}"
    if seeds == {1}:
        how += " (1 seed: no interval over seeds; MLM top-1 is one value per run)"
    how += (f". `unseen F1 − {exp.control}`: paired {ONE_SEED} on the same ROOD-unseen patients per seed, "
            "t interval over seeds when more than one. Rare-code neighbours: related of scored, summed over seeds; "
            "rarest-bin accuracy: Clopper-Pearson 95 % interval over the bin's probes (t over seeds)")  # fmt: skip
    n = V.ranked_codes(exp.configurations)
    how += f"; a random ranking of the {n:,} codes would find {_chance_top100(n)}." if n else "."
    if exp.baselines is None:
        how += (
            " No baselines in this experiment (`baselines/baselines.json` missing): model rows stand alone."
        )
    collapsed = [c for c, _ in _collapsed(exp)]
    if collapsed:
        how += (f" **Collapsed pretraining: {', '.join(collapsed)}** (MLM top-1 no better than the most frequent "
                "code; see the masked-code section): its rows are not evidence about its configuration.")  # fmt: skip
    return how


def headline(exp: Experiment, hv: dict[str, Any] | None = None) -> str:
    """The headline table (configurations, then the baselines) and its caption."""
    return _headline_table(exp, hv or _headline_values(exp)) + "\n\n" + headline_caption(exp)


# ----------------------------------------------------------------------------- sections


def _tests_lines(exp: Experiment, metrics: list[tuple[str, dict[str, dict[int, float]]]]) -> list[str]:
    """Tests over pretraining seeds of each configuration against the control: (label, {config: {seed:
    value}}) per metric."""
    confs = exp.configurations
    if exp.control not in confs or len(confs) < 2:
        return []
    if all(len(runs) < 2 for runs in confs.values()):
        return [
            "",
            f"Tests over pretraining seeds against `{exp.control}`: 1 seed per configuration, n too "
            "small for a test (fine-tuning trials are never treated as replicates).",
        ]
    rows = []
    for label, groups in metrics:
        if not groups.get(exp.control):
            continue
        for k, r in compare_over_seeds(groups, exp.control).items():
            rows.append([k, label, r["test"] or "none", _p(r["pvalue"]),
                         f"{100 * r['diff']:+.1f}" if math.isfinite(r["diff"]) else "–", r["note"]])  # fmt: skip
    if not rows:
        return []
    return ["", f"Tests over pretraining seeds against `{exp.control}` (paired t when seeds match, Welch "
            "otherwise, Dunnett when every configuration has >= 3 seeds and several are compared; fine-tuning "
            "trials are never treated as replicates):", "",
            table(["configuration", "metric", "test", "p", "difference (points)", "note"], rows)]  # fmt: skip


def _mlm_section(exp: Experiment) -> list[str]:
    rows = [[k, str(len(runs))] + [_pct(V.mlm_interval(runs, key)) for key, _ in MLM_KEYS]
            for k, runs in exp.configurations.items()]  # fmt: skip
    b = exp.baselines
    if b is not None:
        names = {n for _, bk in MLM_KEYS for n in b.mlm(bk)}
        for n in sorted(
            names, key=lambda n: list(MLM_BASELINE_NAMES).index(n) if n in MLM_BASELINE_NAMES else 99
        ):
            rows.append([f"baseline: {MLM_BASELINE_NAMES.get(n, n)}", "–"]
                        + [_pct(Interval(b.mlm(bk)[n], math.nan, math.nan, 0, "")) if n in b.mlm(bk) else "–"
                           for _, bk in MLM_KEYS])  # fmt: skip
    lines = ["## Masked-code modelling (pretraining validation)", "",
             "Last validation of each pretraining run (with the model's code cache when pretraining chose one: "
             "`mlm_cache.json` of the run); several seeds: " + OVER_SEEDS + " (1 seed: no interval "
             "over seeds). Baselines predict the masked code without a model "
             + ("(`baselines/baselines.json`)." if b is not None else "(none in this experiment)."), "",
             table(["model", "seeds", "MLM top-1", "top-10", "top-100"], rows)]  # fmt: skip
    tests = [(NAMES[key], {k: {r.seed: r.mlm[key] for r in runs if V._finite(r.mlm.get(key))}
                           for k, runs in exp.configurations.items()}) for key, _ in MLM_KEYS]  # fmt: skip
    collapsed = [f"{c} (MLM top-1 {100 * a:.1f} %)" for c, a in _collapsed(exp)]
    if collapsed:
        floor = 100 * exp.baselines.mlm("top1")["most_frequent"]
        lines += ["", f"Note: no better than the most-frequent-code baseline ({floor:.1f} %): "
                  f"{', '.join(collapsed)}. Such a run did not learn to use the context (its masked-code "
                  "predictions are the code frequencies), and every result fine-tuned from it is that of a "
                  "collapsed model, not of its configuration."]  # fmt: skip
    return lines + _tests_lines(exp, tests) + [""]


COLLAPSE_MARGIN = 0.002  # MLM top-1 within 0.2 points of the most-frequent-code baseline counts as collapsed


def _collapsed(exp: Experiment) -> list[tuple[str, float]]:
    """``(configuration seed N, MLM top-1)`` of each pretraining run whose last validation top-1 is no better
    than the most-frequent-code baseline (plus :data:`COLLAPSE_MARGIN`); [] without that baseline."""
    floor = exp.baselines.mlm("top1").get("most_frequent") if exp.baselines is not None else None
    if floor is None:
        return []
    return [(f"{k} seed {r.seed}", float(r.mlm["val_mlm_acc"])) for k, runs in exp.configurations.items()
            for r in runs if V._finite(r.mlm.get("val_mlm_acc")) and r.mlm["val_mlm_acc"] <= floor + COLLAPSE_MARGIN]  # fmt: skip


def _task_section(exp: Experiment, task: str, split: str, title: str) -> list[str]:
    confs = exp.configurations
    rows = []
    for k, runs in confs.items():
        ivs = [V.conf_interval(runs, task, split, m) for m in CLS_METRICS]
        if all(iv is None for iv in ivs):
            continue
        if all(
            iv is not None and iv.note == V.CONSTANT for iv in ivs
        ):  # said once, numbers without intervals
            rows.append(
                [f"{k} — predicts a constant", str(len(runs))] + [f"{100 * iv.estimate:.1f}" for iv in ivs]
            )
        else:
            rows.append([k, str(len(runs))] + [_pct(iv) for iv in ivs])
    if not rows:
        return []
    for m in BASELINE_MODELS:
        ivs = [V.baseline_interval(exp.baselines, m, task, split, x) for x in CLS_METRICS]
        if any(iv is not None for iv in ivs):
            rows.append([f"baseline: {BASELINE_NAMES[m]}", "–"] + [_pct(iv) for iv in ivs])
    with_iv = ", ".join(NAMES[m] for m in V.INTERVAL_METRICS[task])
    lines = [f"## {title}", "",
             f"Intervals on {with_iv}: {INTERVALS}. The other columns are point estimates (the mean over "
             "fine-tuning trials on all patients). `predicts a constant`: the head's probabilities do not vary "
             "across patients (no interval shown: resampling patients cannot make it informative). * no per-patient predictions (an older experiment): mean over trials, no "
             "interval.", "", table(["model", "seeds"] + [NAMES[m] for m in CLS_METRICS], rows)]  # fmt: skip
    tests = [
        (NAMES[m], {k: V.per_seed(runs, task, split, m) for k, runs in confs.items()})
        for m in V.INTERVAL_METRICS[task]
    ]
    return lines + _tests_lines(exp, tests) + [""]


def _rood_section(exp: Experiment, plots: Path) -> tuple[list[str], dict[str, Any]]:
    confs, b = exp.configurations, exp.baselines
    splits = ("test", "rood", "rood_unseen")
    ivs: dict[str, dict[str, Interval | None]] = {}
    for k, runs in confs.items():
        ivs[k] = {s: V.conf_interval(runs, "chapters", s, "f1") for s in splits}
    if not any(ivs[k]["rood"] or ivs[k]["rood_unseen"] for k in ivs):
        return [], {}
    for m in BASELINE_MODELS:
        row = {s: V.baseline_interval(b, m, "chapters", s, "f1") for s in splits}
        if row["rood"] or row["rood_unseen"]:
            ivs[f"baseline: {BASELINE_NAMES[m]}"] = row
    n = {s: V.patients(confs, "chapters", s) for s in ("rood", "rood_unseen")}
    rows = [[k] + [_pct(v[s]) for s in splits] for k, v in ivs.items()]
    lines = ["## ROOD: disease chapters of patients with held-out codes", "",
             f"Chapters macro-F1 on the test split (seen codes), on `rood` ({n['rood'] or '?'} patients with codes no "
             f"model trained on) and on `rood_unseen` ({n['rood_unseen'] or 'no'} patients whose codes are mostly "
             f"held-out). A code no training saw has, in a model saved by this version, what training settled "
             "for it (`untrained_tokens` in the model's `config.json`): an HRR configuration composes it from "
             "trained atoms, with any atom no trained code uses at the mean of its kind; a table row is the "
             f"mean of the trained codes' rows (`add`: zero). Intervals: {INTERVALS}.", "",
             table(["model", "seen (test) F1", "ROOD F1", "ROOD-unseen F1"], rows)]  # fmt: skip
    diffs: dict[str, Any] = {}
    drows = []
    for k in confs:
        if k == exp.control:
            continue
        per, over = V.diff_intervals(exp, k)
        diffs[k] = {"per_seed": {str(s): iv.as_dict() for s, iv in per.items()}, "over_seeds": _d(over)}
        drows += [
            [f"{k} − {exp.control}", f"seed {s}", _pct(iv, signed=True), iv.method] for s, iv in per.items()
        ]
        if over is not None:
            drows.append([f"{k} − {exp.control}", f"{over.n} seeds", _pct(over, signed=True), over.method])
    if drows:
        lines += ["", "ROOD-unseen chapters F1, difference against the control on the same patients (points):", "",
                  table(["difference", "over", "F1 difference", "interval"], drows)]  # fmt: skip
    from .plots import rood_plot

    p = rood_plot(ivs, plots / "rood.png")
    if p is not None:
        lines += ["", f"![chapters F1 seen vs unseen](plots/{p.name})"]
    return lines + [""], diffs


def _freq_section(exp: Experiment, plots: Path) -> list[str]:
    confs = exp.configurations
    bins = next((r.evaluation["frequency_bins"] for runs in confs.values() for r in runs
                 if r.evaluation.get("frequency_bins")), None)  # fmt: skip
    if not bins:
        return []
    cols, data, ranks, n = [], {}, {}, V.ranked_codes(confs)
    for k, runs in confs.items():
        for key in ("top10", "top100"):
            cols.append(f"{k} {NAMES['val_' + key]}")
            data[cols[-1]] = [V.bin_interval(runs, j, key) for j in range(len(bins))]
        ranks[f"{k} median rank"] = [V.bin_median_rank(runs, j) for j in range(len(bins))]
    ranks = {c: v for c, v in ranks.items() if any(x is not None for x in v)}
    best = _best_baseline_bins(exp, len(bins))
    rows = [[f"[{b['low']:.0f}, {b['high']:.0f})", str(b["codes_in_bin"]), str(b["probes"])]
            + [("empty" if not b["probes"] else _pct(data[c][j])) for c in cols]
            + [("–" if v[j] is None else f"{v[j]:,.0f}") for v in ranks.values()]
            + ([f"{100 * best[j][1]:.1f} ({MLM_BASELINE_NAMES.get(best[j][0], best[j][0])}; {best[j][2]} masked)"
                if best[j] else "–"] if best else []) for j, b in enumerate(bins)]  # fmt: skip
    from .plots import frequency_plot

    series = {k: data[f"{k} top-100"] for k in confs}
    p = frequency_plot([(b["low"], b["high"], b["codes_in_bin"], b["probes"]) for b in bins], series,
                       plots / "frequency_bins.png", reference=[x[1] if x else None for x in best] if best else None)  # fmt: skip
    lines = ["## Masked-code accuracy by code frequency", "",
             "One masked code per probe, up to 400 codes per bin of log frequency (ln of the code's share of "
             "pretraining tokens), probes from patients MLM never trained on, scored with the model's code cache "
             "when it has one. Intervals: Clopper-Pearson 95 % "
             "over the bin's probes (one seed), " + OVER_SEEDS + " (several)."
             + (" Best baseline: the best MLM baseline's top-100 accuracy on the validation positions masked for "
                "MLM accuracy whose target falls in the bin (other positions than the probes; no interval)."
                if best else "")
             + (f" Median rank: the probes' median rank of the masked code among all {n:,} codes (1 = first; "
                f"mean over seeds), where a random ranking finds a code among the top 100 {_chance_top100(n)} "
                "of the time." if ranks else ""), "",
             table(["log frequency", "codes", "probes"] + cols + list(ranks) + (["best baseline top-100"] if best else []), rows)]  # fmt: skip
    if p:
        lines += ["", f"![top-100 accuracy by frequency bin](plots/{p.name})"]
    return lines + [""]


def _chance_top100(n: int) -> str:
    """How often a random ranking of ``n`` codes puts a given code among its top 100, in %."""
    return f"{100 * min(100, n) / n:.2f} %"


def _best_baseline_bins(exp: Experiment, n_bins: int) -> list[tuple[str, float, int] | None]:
    """Per frequency bin the best MLM baseline's (name, top-100, masked positions); [] without them."""
    b = exp.baselines
    bins = ((b.record.get("mlm") or {}).get("frequency_bins") or []) if b is not None else []
    if len(bins) != n_bins:
        return []
    out: list[tuple[str, float, int] | None] = []
    for x in bins:
        acc = {k: v for k, v in (x.get("top100") or {}).items() if V._finite(v)}
        out.append(
            (max(acc, key=acc.get), acc[max(acc, key=acc.get)], int(x.get("n_masked", 0))) if acc else None
        )
    return out if any(out) else []


def _neighbour_section(exp: Experiment) -> list[str]:
    confs, control = exp.configurations, exp.control
    counts = {k: {g: V.rare_neighbours(runs, g) for g in GROUPS} for k, runs in confs.items()}
    if not any(t for g in counts.values() for _, t in g.values()):
        return []
    rows = [
        [k] + [f"{r}/{t}" if t else "–" for r, t in (g[grp] for grp in GROUPS)] for k, g in counts.items()
    ]
    lines = ["## Nearest neighbours and the ontology", "",
             "Top-4 cosine neighbours of each code judged related when within two is-a steps of the code's "
             "SNOMED concepts or sharing a finding site and an associated morphology (summed over pretraining "
             "seeds).", "", table(["configuration", "case studies", "common", "rare", "random"], rows)]  # fmt: skip
    if control in counts and len(counts) > 1:
        prow = []
        for k, g in counts.items():
            if k == control:
                continue
            cells = []
            for grp in ("common", "rare", "random"):
                (a, n), (b, m) = g[grp], counts[control][grp]
                two = fisher(a, n, b, m)["pvalue"] if n and m else math.nan
                one = fisher(a, n, b, m, alternative="greater")["pvalue"] if n and m else math.nan
                cells.append(f"{_p(two)} / {_p(one)}")
            prow.append([k] + cells)
        lines += ["", f"Fisher's exact test against `{control}` (two-sided / one-sided greater):", "",
                  table(["configuration", "common", "rare", "random"], prow)]  # fmt: skip
    for k, runs in confs.items():
        ev = next((r.evaluation for r in runs if "neighbours" in r.evaluation), None)
        cases = ev["neighbours"]["groups"].get("case_studies", {}).get("codes", []) if ev else []
        if cases:
            lines += ["", f"Case studies, `{k}` (first seed; ✓ related):", ""]
            lines += [f"- **{q['code']}** {q['title']}: " + "; ".join(
                f"{n['code']} {n['title']}{' ✓' if n['related'] else ''}" for n in q["neighbours"]) for q in cases]  # fmt: skip
    return lines + [""]


UNBINDING_KINDS = ("is_a", "attribute", "description")  # relation kinds with a column of their own


def _mean_of(values: list[Any]) -> float | None:
    """The mean of the finite numbers in ``values`` (None when there are none)."""
    vals = [float(v) for v in values if V._finite(v)]
    return sum(vals) / len(vals) if vals else None


def _unbinding_section(exp: Experiment) -> list[str]:
    """Per HRR configuration: the HRR dimension and the unbinding recall at top-1 / top-5 (mean over
    pretraining seeds), overall and top-5 per relation kind."""
    rows = []
    for k, runs in exp.configurations.items():
        us = [r.evaluation["unbinding_recall"] for r in runs if r.evaluation.get("unbinding_recall")]
        if not us:
            continue

        def top(at: str, kind: str | None = None, us=us) -> float | None:
            parts = [
                u["recall"] if kind is None else u["per_kind"].get(kind, {}).get("recall", {}) for u in us
            ]
            return _mean_of([p.get(at) for p in parts])

        rows.append([k, us[0].get("dim", "–"), sum(u["rows"] for u in us), sum(u["edges"] for u in us),
                     top("1"), top("5")] + [top("5", kind) for kind in UNBINDING_KINDS])  # fmt: skip
    if not rows:
        return []
    header = ["configuration", "dimension", "codes", "edges", "top-1", "top-5"] + [
        f"top-5 {kind.replace('_', '-')}" for kind in UNBINDING_KINDS
    ]
    return ["## Unbinding recall", "",
            "A seeded sample of ICD codes per pretraining seed: each code's trained HRR vector unbound with the "
            "relation of each of its program edges and cleaned up against the trained atoms that relation takes "
            "anywhere in the program (its role's memory: body structures for a finding site); the share of edges "
            "whose atom ranks in the top 1 / top 5 (mean over seeds; codes and edges summed). A relation with m "
            "atoms on one code is m edges ranked against the same query.", "", table(header, rows), ""]  # fmt: skip


def _tsne_section(exp: Experiment) -> list[str]:
    imgs = [(k, runs[0].eval_dir, runs[0].evaluation["tsne"]) for k, runs in exp.configurations.items()
            if runs and runs[0].evaluation.get("tsne")]  # fmt: skip
    if not imgs:
        return []
    by_chapter = all(t.get("coloured_by") == "chapter" for _, _, t in imgs)
    what = ("coloured by ICD chapter, rare codes (seen 1–3 times in pretraining) marked with black crosses"
            if by_chapter else "coloured by log frequency")  # fmt: skip
    lines = [f"## Token embeddings (t-SNE, {what}; first seed)", ""]
    return lines + [f"![{k}]({d}/{t['path']})" for k, d, t in imgs] + [""]


def _cost_section(exp: Experiment) -> list[str]:
    keys = ("embedding_build_s", "step_s", "build_share", "tokens_per_s", "sequences_per_s",
            "training_seq_per_s", "peak_memory_mb")  # fmt: skip
    rows = []
    for k, runs in exp.configurations.items():
        cs = [r.evaluation["cost"] for r in runs if r.evaluation.get("cost")]
        if not cs:
            continue

        def m(key: str, scale: float = 1.0, fmt: str = "{:.1f}", cs=cs) -> str:
            vals = [x[key] for x in cs if V._finite(x.get(key))]
            return fmt.format(scale * sum(vals) / len(vals)) if vals else "–"

        rows.append([k, m(keys[0], 1e3, "{:.2f}"), m(keys[1], 1e3), m(keys[2], 100), m(keys[3], fmt="{:.0f}"),
                     m(keys[4]), m(keys[5]), m(keys[6], fmt="{:.0f}"), cs[0].get("device", "")])  # fmt: skip
    if not rows:
        return []
    header = ["configuration", "embedding build (ms)", "step (ms)", "build share (%)", "tokens/s", "seq/s (timed)",
              "seq/s (pretraining log)", "peak memory (MB)", "device"]  # fmt: skip
    return ["## Cost", "", "A training step (forward, backward, AdamW) timed on one batch after a warm-up, mean "
            "over pretraining seeds; peak memory is CUDA max-allocated on a GPU, the process's peak RSS on a CPU.",
            "", table(header, rows), ""]  # fmt: skip


def _intro(exp: Experiment) -> list[str]:
    rec, confs = exp.record, exp.configurations
    cfg = rec.get("config", {})
    lines = [f"# Experiment `{rec.get('name', exp.root.name)}`", ""]
    if exp.synthetic:
        lines += [SYNTHETIC, ""]
    lines += [f"Model `{cfg.get('model')}`, configurations {', '.join(f'`{c}`' for c in confs)} (control "
              f"`{exp.control}`), {cfg.get('pretrain_seeds')} pretraining seed(s) x {cfg.get('trials')} fine-tuning "
              f"trial(s) per task. Cells: the metric in %, its 95 % interval in parentheses; each caption names "
              "how the interval was made.", ""]  # fmt: skip
    notes = []
    if exp.baselines is None:
        notes.append("no baselines (`baselines/baselines.json` is missing: an experiment from before the "
                     "baselines); model rows are shown without them")  # fmt: skip
    old = sorted({f"{k} seed {r.seed}" for k, runs in confs.items() for r in runs if r.trial_scores})
    if old:
        notes.append(f"no per-patient predictions for {', '.join(old)} (an experiment from before them): their "
                     "cells, marked *, are means over fine-tuning trials without an interval")  # fmt: skip
    return lines + [f"Note: {n}." for n in notes] + ([""] if notes else [])


def _provenance(exp: Experiment) -> list[str]:
    def first(key: str) -> str:
        return next((str(r.evaluation[key]) for runs in exp.configurations.values() for r in runs
                     if r.evaluation.get(key)), "–")  # fmt: skip

    rec = exp.record
    vers = ", ".join(
        f"{k} {v}" for k, v in rec.get("versions", {}).items() if k in ("torch", "hrrbert", "python")
    )
    return ["## Provenance", "",
            f"program `{first('program_id')}`, dataset `{first('dataset_id')}`, transfer dataset "
            f"`{first('transfer_dataset_id')}`; versions {vers}; started {rec.get('created_at')}, finished "
            f"{rec.get('finished_at', 'not yet')}.", ""]  # fmt: skip


# ----------------------------------------------------------------------------- the report


def _results(exp: Experiment, hv: dict[str, Any], rood: dict[str, Any]) -> dict[str, Any]:
    conv = {k: {m: (_d(v) if isinstance(v, Interval) else v) for m, v in row.items()}
            for k, row in hv["configurations"].items()}  # fmt: skip
    base = {
        k: ({m: _d(v) for m, v in row.items()} if k != "mlm" else row) for k, row in hv["baselines"].items()
    }
    constant = sorted({f"{k} seed {r.seed}: {t}/{s}" for k, runs in exp.configurations.items() for r in runs
                       for (t, s), h in r.heads.items() if h.constant_trials})  # fmt: skip
    return {
        "schema_version": RESULTS_SCHEMA,
        "experiment": exp.record.get("name", exp.root.name),
        "synthetic": exp.synthetic,
        "control": exp.control,
        "methods": {
            "one_seed": ONE_SEED,
            "over_seeds": OVER_SEEDS,
            "difference": f"paired {ONE_SEED} (same patients), t interval over seeds when several",
            "rarest_bin": "Clopper-Pearson 95 % over the bin's probes; t over seeds when several",
            "neighbours": "related of scored neighbours, summed over seeds",
            "trials": "a model's fine-tuning trials are averaged on each resample, never treated as replicates",
        },  # fmt: skip
        "configurations": conv,
        "baselines": base,
        "rood_differences": rood,
        "constant_heads": constant,
        "collapsed_pretraining": [c for c, _ in _collapsed(exp)],
        "notes": [] if exp.baselines is not None else ["no baselines in this experiment"],
    }


def write_report(root: str | Path) -> Report:
    """Write ``<root>/report.md``, ``<root>/results.json`` (and ``plots/``) for the experiment in ``root``."""
    exp = load_experiment(root)
    plots = exp.root / "plots"
    hv = _headline_values(exp)
    head = headline(exp, hv)
    lines = _intro(exp) + ["## Headline", "", head, ""]
    lines += _mlm_section(exp)
    for task, split, title in TASK_SECTIONS:
        lines += _task_section(exp, task, split, title)
    rood_lines, rood = _rood_section(exp, plots)
    lines += rood_lines
    lines += _freq_section(exp, plots)
    lines += _neighbour_section(exp)
    lines += _unbinding_section(exp)
    lines += _tsne_section(exp)
    lines += _cost_section(exp)
    lines += _provenance(exp)
    path = exp.root / REPORT_FILE
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text("\n".join(lines), encoding="utf-8")
    tmp.replace(path)
    results = exp.root / RESULTS_FILE
    write_json(results, _results(exp, hv, rood))
    return Report(path, head, results)
