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
from .registry import EVALUATIONS, records
from .sections import (
    BASELINE_NAMES,
    INTERVALS,
    MLM_BASELINE_NAMES,
    NAMES,
    ONE_SEED,
    OVER_SEEDS,
    SectionInputs,
    chance_top100,
    pct,
    task_section,
    tests_lines,
)
from .stats import Interval, finite

__all__ = ["EXPERIMENT_FILE", "REPORT_FILE", "RESULTS_FILE", "Report", "report", "write_report", "headline"]

log = logging.getLogger(__name__)

REPORT_FILE = "report.md"
RESULTS_FILE = "results.json"
RESULTS_SCHEMA = 1
MLM_KEYS = (
    ("val_mlm_acc", "top1"),
    ("val_top10", "top10"),
    ("val_top100", "top100"),
)  # run key, baseline key
SYNTHETIC = (
    "**This is a synthetic (demo) run.** The synthetic ground truth ties outcomes to the ontology: the "
    "conditions' ontology attributes drive the outcomes, and reserved codes are used only by flagged "
    "patients. The demo therefore shows that the method *can use* ontology structure when outcomes follow "
    "it; whether real outcomes do is answered only by `hrrbert experiment` on MIMIC-IV/eICU."
)
# the fine-tuned tasks on their test split (the transfer task is the section of the transfer evaluation)
TASK_SECTIONS = (
    ("mortality", "test", "Mortality within 6 months (test)"),
    ("chapters", "test", "Disease chapters, multi-label (test; macro over chapters)"),
)


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


def _d(iv: Interval | None) -> dict | None:
    return iv.as_dict() if iv is not None else None


# ----------------------------------------------------------------------------- headline


def _headline_values(exp: Experiment) -> dict[str, Any]:
    """results.json's ``configurations`` and ``baselines`` parts (Interval objects, not yet dicts)."""
    fb, nb = records(exp, "frequency_bins"), records(exp, "neighbours")
    confs, b, j = exp.configurations, exp.baselines, V.rarest_bin(fb)
    out: dict[str, Any] = {"configurations": {}, "baselines": {}, "rarest_bin": j}
    rivals = _rivals(exp)
    for k, runs in confs.items():
        diff = V.diff_intervals(exp, k) if k != exp.control else ({}, None)
        rival = _rival_cells(exp, k, rivals)
        rel, tot = V.rare_neighbours(nb[k])
        out["configurations"][k] = {
            "seeds": [r.seed for r in runs],
            "mlm_top1": V.mlm_interval(runs, "val_mlm_acc"),
            "chapters_f1": V.conf_interval(runs, "chapters", "test", "f1"),
            "mortality_auroc": V.conf_interval(runs, "mortality", "test", "auroc"),
            "rood_unseen_chapters_f1": V.conf_interval(runs, "chapters", "rood_unseen", "f1"),
            "rood_unseen_f1_minus_control": diff[1] or next(iter(diff[0].values()), None),
            "best_rival": rival,
            "rare_neighbours": {"related": rel, "total": tot} if tot else None,
            "rarest_bin_top100": V.bin_interval(fb[k], j) if j is not None else None,
            "rarest_bin_median_rank": V.bin_median_rank(fb[k], j) if j is not None else None,
            "transfer_mortality_auroc": V.conf_interval(runs, "mortality", "transfer", "auroc"),
        }
    for m in BASELINE_MODELS:
        row = {
            "chapters_f1": V.baseline_interval(b, m, "chapters", "test", "f1"),
            "mortality_auroc": V.baseline_interval(b, m, "mortality", "test", "auroc"),
            "rood_unseen_chapters_f1": V.baseline_interval(b, m, "chapters", "rood_unseen", "f1"),
            "transfer_mortality_auroc": V.baseline_interval(b, m, "mortality", "transfer", "auroc"),
        }
        if any(v is not None for v in row.values()):
            out["baselines"][m] = row
    mlm = b.mlm_top1 if b is not None else {}
    if mlm:
        best = max(mlm, key=mlm.get)
        out["baselines"]["mlm"] = {"top1": mlm, "best": best, "best_top1": mlm[best]}
    return out


RIVAL_COLUMNS = {  # headline column -> (task, split, metric)
    "chapters_f1": ("chapters", "test", "f1"),
    "mortality_auroc": ("mortality", "test", "auroc"),
    "rood_unseen_chapters_f1": ("chapters", "rood_unseen", "f1"),
    "transfer_mortality_auroc": ("mortality", "transfer", "auroc"),
}


def _composes(conf: str) -> bool:
    from hrr_kernel.modes import MODES  # only the headline's rivals ask

    return conf in MODES and MODES[conf].composes


def _rivals(exp: Experiment) -> tuple[str, ...]:
    """What an HRR configuration is read against: every configuration that composes nothing (the control,
    the hierarchy rivals) and every baseline but the oracle ceiling."""
    confs = tuple(k for k in exp.configurations if not _composes(k))
    return confs + tuple(V.BASELINE_PREFIX + m for m in BASELINE_MODELS if m != "ceiling")


def _rival_name(name: str) -> str:
    if name.startswith(V.BASELINE_PREFIX):
        m = name[len(V.BASELINE_PREFIX) :]
        return BASELINE_NAMES.get(m, m)
    return name


def _rival_cells(exp: Experiment, conf: str, rivals: tuple[str, ...]) -> dict[str, Any] | None:
    """For an HRR configuration: per headline column the best non-oracle rival (``name``, ``value``), and
    ``unseen F1 − best rival`` on the ROOD-unseen patients (paired patient bootstrap per seed, t over
    seeds). None for a configuration that composes nothing (it is a rival itself)."""
    if not _composes(conf):
        return None
    out: dict[str, Any] = {}
    for col, (task, split, metric) in RIVAL_COLUMNS.items():
        best = V.best_rival(exp, conf, task, split, metric, rivals)
        out[col] = (
            None if best is None else {"rival": best[0], "name": _rival_name(best[0]), "value": best[1]}
        )
    unseen = out["rood_unseen_chapters_f1"]
    if unseen is not None:
        per, over = V.diff_intervals(exp, conf, rival=unseen["rival"])
        out["rood_unseen_f1_minus_best_rival"] = over or next(iter(per.values()), None)
    return out


def _rival_cell(v: dict[str, Any], col: str) -> str:
    r = (v.get("best_rival") or {}).get(col)
    return "–" if not r else f"{pct(r['value'])} {r['name']}"


def _headline_table(exp: Experiment, hv: dict[str, Any]) -> str:
    j = hv["rarest_bin"]
    bin_name = "rarest bin"
    for recs in records(exp, "frequency_bins").values():
        bins = recs[0].bins if recs and recs[0] is not None else []
        if j is not None and j < len(bins):
            bin_name = f"bin [{bins[j].low:.0f}, {bins[j].high:.0f})"
            break
    header = [
        "model",
        "seeds",
        "MLM top-1",
        "chapters macro-F1",
        "mortality AUROC",
        "ROOD-unseen chapters F1",
        "unseen F1 − best rival",
        f"unseen F1 − {exp.control}",
        "rare-code neighbours related",
        f"top-100, {bin_name}",
        "eICU transfer AUROC",
    ]
    rows = []
    for k, v in hv["configurations"].items():
        nb = v["rare_neighbours"]
        rival = v.get("best_rival")
        if rival is not None:
            vs_rival = pct(rival.get("rood_unseen_f1_minus_best_rival"), signed=True)
        else:
            vs_rival = _constant_row_note(k) if k == exp.control else "(rival)"
        rows.append(
            [
                k,
                str(len(v["seeds"])),
                pct(v["mlm_top1"]),
                pct(v["chapters_f1"]),
                pct(v["mortality_auroc"]),
                pct(v["rood_unseen_chapters_f1"]),
                vs_rival,
                pct(v["rood_unseen_f1_minus_control"], signed=True) if k != exp.control else "(control)",
                f"{nb['related']}/{nb['total']}" if nb else "–",
                pct(v["rarest_bin_top100"]),
                pct(v["transfer_mortality_auroc"]),
            ]
        )
        if rival is not None:
            rows.append(
                [f"↳ best rival of {k}", "–", "–"]
                + [_rival_cell(v, c) for c in ("chapters_f1", "mortality_auroc", "rood_unseen_chapters_f1")]
                + ["–", "–", "–", "–", _rival_cell(v, "transfer_mortality_auroc")]
            )
    mlm = hv["baselines"].get("mlm")
    if mlm:
        name = MLM_BASELINE_NAMES.get(mlm["best"], mlm["best"])
        rows.append([f"best MLM baseline ({name})", "–", f"{100 * mlm['best_top1']:.1f}"] + ["–"] * 8)
    for m, v in hv["baselines"].items():
        if m == "mlm":
            continue
        rows.append(
            [
                f"baseline: {BASELINE_NAMES.get(m, m)}",
                "–",
                "–",
                pct(v["chapters_f1"]),
                pct(v["mortality_auroc"]),
                pct(v["rood_unseen_chapters_f1"]),
                "–",
                "–",
                "–",
                "–",
                pct(v["transfer_mortality_auroc"]),
            ]
        )
    return table(header, rows)


def _constant_row_note(conf: str) -> str:
    """The control's cell in ``unseen F1 − best rival``: where it predicts a constant."""
    from hrr_kernel.modes import MODES

    spec = MODES.get(conf)
    if spec is not None and not spec.composes and spec.untrained_fill is not None:
        return "(control: one row for every unseen code)"
    return "(control)"


def headline_caption(exp: Experiment) -> str:
    seeds = {len(r) for r in exp.configurations.values()}
    how = f"Cells in %, interval in parentheses: {INTERVALS}"
    if seeds == {1}:
        how += " (1 seed: no interval over seeds; MLM top-1 is one value per run)"
    how += (
        f". `unseen F1 − {exp.control}`: paired {ONE_SEED} on the same ROOD-unseen patients per seed, "
        "t interval over seeds when more than one. `↳ best rival`: per column the best non-oracle rival "
        "of the configuration above it (a configuration that composes nothing, or a baseline other than the "
        "ceiling); `unseen F1 − best rival` is the same paired difference against that column's rival. "
        "A control with one row for every unseen code predicts a constant on histories of unseen codes only. "
        "Rare-code neighbours: related of scored, summed over "
        "seeds; rarest-bin accuracy: Clopper-Pearson 95 % interval over the bin's probes (t over seeds)"
    )
    n = V.ranked_codes(records(exp, "frequency_bins"))
    how += f"; a random ranking of the {n:,} codes would find {chance_top100(n)}." if n else "."
    if exp.baselines is None:
        how += (
            " No baselines in this experiment (`baselines/baselines.json` missing): model rows stand alone."
        )
    collapsed = [c for c, _ in _collapsed(exp)]
    if collapsed:
        how += (
            f" **Collapsed pretraining: {', '.join(collapsed)}** (MLM top-1 no better than the most frequent "
            "code; see the masked-code section): its rows are not evidence about its configuration."
        )
    return how


def headline(exp: Experiment, hv: dict[str, Any] | None = None) -> str:
    """The headline table (configurations, then the baselines) and its caption."""
    return _headline_table(exp, hv or _headline_values(exp)) + "\n\n" + headline_caption(exp)


# ----------------------------------------------------------------------------- sections


def _mlm_section(exp: Experiment) -> list[str]:
    rows = [
        [k, str(len(runs))] + [pct(V.mlm_interval(runs, key)) for key, _ in MLM_KEYS]
        for k, runs in exp.configurations.items()
    ]
    b = exp.baselines
    if b is not None:
        names = {n for _, bk in MLM_KEYS for n in b.mlm(bk)}
        for n in sorted(
            names, key=lambda n: list(MLM_BASELINE_NAMES).index(n) if n in MLM_BASELINE_NAMES else 99
        ):
            rows.append(
                [f"baseline: {MLM_BASELINE_NAMES.get(n, n)}", "–"]
                + [
                    pct(Interval(b.mlm(bk)[n], math.nan, math.nan, 0, "")) if n in b.mlm(bk) else "–"
                    for _, bk in MLM_KEYS
                ]
            )
    lines = [
        "## Masked-code modelling (pretraining validation)",
        "",
        "Last validation of each pretraining run (with the model's code cache when pretraining chose one: "
        "`mlm_cache.json` of the run); several seeds: " + OVER_SEEDS + " (1 seed: no interval "
        "over seeds). Baselines predict the masked code without a model "
        + ("(`baselines/baselines.json`)." if b is not None else "(none in this experiment)."),
        "",
        table(["model", "seeds", "MLM top-1", "top-10", "top-100"], rows),
    ]
    tests = [
        (
            NAMES[key],
            {
                k: {r.seed: r.mlm[key] for r in runs if finite(r.mlm.get(key))}
                for k, runs in exp.configurations.items()
            },
        )
        for key, _ in MLM_KEYS
    ]
    collapsed = [f"{c} (MLM top-1 {100 * a:.1f} %)" for c, a in _collapsed(exp)]
    if collapsed:
        floor = 100 * exp.baselines.mlm("top1")["most_frequent"]
        lines += [
            "",
            f"Note: no better than the most-frequent-code baseline ({floor:.1f} %): "
            f"{', '.join(collapsed)}. Such a run did not learn to use the context (its masked-code "
            "predictions are the code frequencies), and every result fine-tuned from it is that of a "
            "collapsed model, not of its configuration.",
        ]
    return lines + tests_lines(exp, tests) + [""]


COLLAPSE_MARGIN = 0.002  # MLM top-1 within 0.2 points of the most-frequent-code baseline counts as collapsed


def _collapsed(exp: Experiment) -> list[tuple[str, float]]:
    """``(configuration seed N, MLM top-1)`` of each pretraining run whose last validation top-1 is no better
    than the most-frequent-code baseline (plus :data:`COLLAPSE_MARGIN`); [] without that baseline."""
    floor = exp.baselines.mlm("top1").get("most_frequent") if exp.baselines is not None else None
    if floor is None:
        return []
    return [
        (f"{k} seed {r.seed}", float(r.mlm["val_mlm_acc"]))
        for k, runs in exp.configurations.items()
        for r in runs
        if finite(r.mlm.get("val_mlm_acc")) and r.mlm["val_mlm_acc"] <= floor + COLLAPSE_MARGIN
    ]


def _intro(exp: Experiment) -> list[str]:
    rec, confs = exp.record, exp.configurations
    cfg = rec.get("config", {})
    lines = [f"# Experiment `{rec.get('name', exp.root.name)}`", ""]
    if exp.synthetic:
        lines += [SYNTHETIC, ""]
    lines += [
        f"Model `{cfg.get('model')}`, configurations {', '.join(f'`{c}`' for c in confs)} (control "
        f"`{exp.control}`), {cfg.get('pretrain_seeds')} pretraining seed(s) x {cfg.get('trials')} "
        f"fine-tuning trial(s) per task. Cells: the metric in %, its 95 % interval in parentheses; each "
        "caption names how the interval was made.",
        "",
    ]
    own = {c: o for c, o in (cfg.get("finetune_by_configuration") or {}).items() if c in confs and o}
    if own:  # the fine-tuning recipes that differ between configurations, so that a reader sees them
        common = cfg.get("finetune") or {}
        parts = [f"`{c}`: " + ", ".join(f"{k} {v}" for k, v in sorted(o.items())) for c, o in own.items()]
        lines += [
            "Fine-tuning per configuration, on top of the common recipe ("
            + ", ".join(f"{k} {v}" for k, v in sorted(common.items()))
            + "): "
            + "; ".join(parts)
            + ".",
            "",
        ]
    notes = []
    if exp.baselines is None:
        notes.append(
            "no baselines (`baselines/baselines.json` is missing: an experiment from before the "
            "baselines); model rows are shown without them"
        )
    old = sorted({f"{k} seed {r.seed}" for k, runs in confs.items() for r in runs if r.trial_scores})
    if old:
        notes.append(
            f"no per-patient predictions for {', '.join(old)} (an experiment from before them): their "
            "cells, marked *, are means over fine-tuning trials without an interval"
        )
    return lines + [f"Note: {n}." for n in notes] + ([""] if notes else [])


def _provenance(exp: Experiment) -> list[str]:
    def first(key: str) -> str:  # of the evaluations' header (not of one evaluation's record)
        return next(
            (
                str(r.evaluation[key])
                for runs in exp.configurations.values()
                for r in runs
                if r.evaluation.get(key)
            ),
            "–",
        )

    transfer = next(
        (
            str(t.dataset_id)
            for recs in records(exp, "transfer").values()
            for t in recs
            if t is not None and t.dataset_id
        ),
        "–",
    )
    rec = exp.record
    vers = ", ".join(
        f"{k} {v}" for k, v in rec.get("versions", {}).items() if k in ("torch", "hrrbert", "python")
    )
    return [
        "## Provenance",
        "",
        f"program `{first('program_id')}`, dataset `{first('dataset_id')}`, transfer dataset "
        f"`{transfer}`; versions {vers}; started {rec.get('created_at')}, finished "
        f"{rec.get('finished_at', 'not yet')}.",
        "",
    ]


# ----------------------------------------------------------------------------- the report


def _results(exp: Experiment, hv: dict[str, Any], rood: dict[str, Any]) -> dict[str, Any]:
    conv = {k: _plain(row) for k, row in hv["configurations"].items()}
    base = {
        k: ({m: _d(v) for m, v in row.items()} if k != "mlm" else row) for k, row in hv["baselines"].items()
    }
    constant = sorted(
        {
            f"{k} seed {r.seed}: {t}/{s}"
            for k, runs in exp.configurations.items()
            for r in runs
            for (t, s), h in r.heads.items()
            if h.constant_trials
        }
    )
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
            "trials": (
                "a model's fine-tuning trials are averaged on each resample, never treated as replicates"
            ),
        },
        "configurations": conv,
        "baselines": base,
        "rood_differences": rood,
        "constant_heads": constant,
        "collapsed_pretraining": [c for c, _ in _collapsed(exp)],
        "notes": [] if exp.baselines is not None else ["no baselines in this experiment"],
    }


def _plain(v: Any) -> Any:
    """``v`` with every Interval as its dict (results.json)."""
    if isinstance(v, Interval):
        return _d(v)
    if isinstance(v, dict):
        return {k: _plain(x) for k, x in v.items()}
    return v


def write_report(root: str | Path) -> Report:
    """Write ``<root>/report.md``, ``<root>/results.json`` (and ``plots/``) for the experiment in ``root``."""
    exp = load_experiment(root)
    plots = exp.root / "plots"
    hv = _headline_values(exp)
    head = headline(exp, hv)
    lines = _intro(exp) + ["## Headline", "", head, ""]
    lines += _mlm_section(exp)  # position 10
    for task, split, title in TASK_SECTIONS:  # position 20
        lines += task_section(exp, task, split, title)
    extra: dict[str, Any] = {}  # results.json parts the sections add
    for ev in sorted((e for e in EVALUATIONS if e.section is not None), key=lambda e: e.position):
        lines += ev.section(SectionInputs(exp, records(exp, ev.name), plots, extra))
    lines += _provenance(exp)
    path = exp.root / REPORT_FILE
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text("\n".join(lines), encoding="utf-8")
    tmp.replace(path)
    results = exp.root / RESULTS_FILE
    out = _results(exp, hv, extra.get("rood_differences", {}))
    for key in ("next_visit", "history_bound"):  # the next-visit section's numbers; the ROOD section's bound
        if key in extra:
            out[key] = extra[key]
    write_json(results, out)
    return Report(path, head, results)
