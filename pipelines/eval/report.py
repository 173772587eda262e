"""The Markdown report of an experiment: :func:`write_report` / :func:`report` (``hrrbert report``).

Reads only the files an experiment wrote (``experiment.json``, each pretraining run's
``metrics.jsonl``, each fine-tuning run's ``summary.json``, each ``evaluation.json``) and writes
``report.md`` plus ``plots/`` beside them. Tables follow the paper's layout: rows are configurations,
columns metrics, each cell the mean over trials with its bootstrap 95 % interval; below each table the
two-sided Dunnett p-values against the unstructured control (Welch for ROOD, Fisher for the neighbour
counts; :mod:`pipelines.eval.stats`).
"""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pipelines.errors import PipelineError

from .markdown import table
from .stats import dunnett_vs_control, fisher, mean_ci, welch

log = logging.getLogger(__name__)

REPORT_FILE = "report.md"
CLS_METRICS = ("accuracy", "precision", "recall", "f1", "auroc", "auprc")
MLM_METRICS = ("val_mlm_acc", "val_top10", "val_top100")
NAMES = {"val_mlm_acc": "MLM acc", "val_top10": "top-10", "val_top100": "top-100", "f1": "F1",
         "auroc": "AUROC", "auprc": "AUPRC", "accuracy": "acc", "precision": "prec", "recall": "rec"}  # fmt: skip
GROUPS = ("case_studies", "common", "rare", "random")
EXPERIMENT_FILE = "experiment.json"  # marks an experiment folder (pipelines.eval.experiment writes it)


@dataclass
class Report:
    path: Path
    headline: str  # the headline table (Markdown)


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


def _read_json(p: Path) -> Any:
    if not p.is_file():
        raise PipelineError(f"{p}: missing; the experiment is incomplete (run `hrrbert experiment` again)")
    try:
        return json.loads(p.read_text(encoding="utf-8"))
    except json.JSONDecodeError as e:
        raise PipelineError(f"{p}: not valid JSON ({e})") from e


def _last_validation(run: Path) -> dict[str, float]:
    p = run / "metrics.jsonl"
    last: dict[str, float] = {}
    if p.is_file():
        for ln in p.read_text(encoding="utf-8").splitlines():
            r = json.loads(ln) if ln.strip() else {}
            if "val_mlm_acc" in r:
                last = r
    return last


def load_experiment(root: Path) -> dict[str, Any]:
    """Everything the report shows, gathered per configuration (in the experiment's order)."""
    exp = _read_json(root / EXPERIMENT_FILE)
    confs: dict[str, dict[str, Any]] = {}
    for run in exp.get("runs", []):
        c = confs.setdefault(run["configuration"], {"mlm": [], "tasks": {}, "evals": []})
        c["mlm"].append(_last_validation(root / run["pretrain"]))
        for task, ft in run.get("finetune", {}).items():
            summary = _read_json(root / ft / "summary.json")
            c["tasks"].setdefault(task, []).extend(t.get("test") or {} for t in summary["trials"])
        ev = _read_json(root / run["evaluation"])
        ev["_dir"] = str(Path(run["evaluation"]).parent)
        c["evals"].append(ev)
    return {"experiment": exp, "configurations": confs}


def _pct(iv) -> str:
    if iv.n == 0 or math.isnan(iv.mean):
        return "–"
    if iv.n == 1:
        return f"{100 * iv.mean:.1f}"
    return f"{100 * iv.mean:.1f} ({100 * iv.low:.1f}–{100 * iv.high:.1f})"


def _p(x: float) -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "–"
    return f"{x:.3g}" if x >= 1e-15 else "<1e-15"


def _metric_section(title: str, values: dict[str, list[dict]], metrics, control: str, note: str) -> list[str]:
    """A mean (95 % CI) table, rows = configurations, and the Dunnett p-values against the control."""
    if not any(values.values()):
        return []
    rows = [
        [conf, str(len(v))] + [_pct(mean_ci([r.get(m) for r in v])) for m in metrics]
        for conf, v in values.items()
    ]
    lines = [
        f"## {title}",
        "",
        note,
        "",
        table(["configuration", "n"] + [NAMES.get(m, m) for m in metrics], rows),
    ]
    if control in values and len(values) > 1:
        tests = {
            m: dunnett_vs_control({k: [r.get(m) for r in v] for k, v in values.items()}, control)
            for m in metrics
        }
        prow = [[k] + [_p(tests[m][k]["pvalue"]) for m in metrics] for k in values if k != control]
        lines += ["", f"Two-sided Dunnett p-values against `{control}`:", "",
                  table(["configuration"] + [NAMES.get(m, m) for m in metrics], prow)]  # fmt: skip
    return lines + [""]


def _rood_section(confs: dict[str, Any], control: str) -> list[str]:
    per = {k: [t for ev in c["evals"] for t in ev.get("rood", [])] for k, c in confs.items()}
    if not any(per.values()):
        return []
    header = ["configuration", "trials", "ROOD acc", "ROOD F1", "ROOD AUROC", "unseen patients", "unseen F1"]
    rows = []
    for k, ts in per.items():
        r, u = [t["rood"] for t in ts], [t["rood_unseen"] for t in ts]
        n_unseen = u[0].get("n", 0) if u else 0
        rows.append([k, str(len(ts)), _pct(mean_ci([x.get("accuracy") for x in r])),
                     _pct(mean_ci([x.get("f1") for x in r])), _pct(mean_ci([x.get("auroc") for x in r])),
                     str(n_unseen), _pct(mean_ci([x.get("f1") for x in u])) if n_unseen else "empty"])  # fmt: skip
    n_rood = per[next(iter(per))][0]["rood"].get("n", 0) if per[next(iter(per))] else 0
    lines = ["## ROOD: disease chapters of patients with held-out codes", "",
             f"The chapters models on the `rood` split ({n_rood} patients whose codes include ones no model "
             "trained on) and its `rood_unseen` subset (codes mostly held-out).", "", table(header, rows)]  # fmt: skip
    if control in per:
        ctrl = per[control]
        prow = []
        for k, ts in per.items():
            if k == control:
                continue
            a = welch([t["rood"].get("f1") for t in ts], [t["rood"].get("f1") for t in ctrl])
            b = welch([t["rood_unseen"].get("f1") for t in ts], [t["rood_unseen"].get("f1") for t in ctrl])
            prow.append([k, _p(a["pvalue"]), _p(b["pvalue"])])
        if prow:
            lines += ["", f"Two-sided Welch t-test p-values against `{control}`:", "",
                      table(["configuration", "ROOD F1", "unseen F1"], prow)]  # fmt: skip
    return lines + [""]


def _freq_section(confs: dict[str, Any], root: Path) -> list[str]:
    bins = None
    cols, data = [], {}
    for k, c in confs.items():
        fb = [ev.get("frequency_bins", []) for ev in c["evals"]]
        if not fb or not fb[0]:
            continue
        bins = fb[0]
        for key in ("top10", "top100"):
            cols.append(f"{k} {NAMES['val_' + key]}")
            data[cols[-1]] = [mean_ci([run[j].get(key) for run in fb]) for j in range(len(bins))]
    if bins is None:
        return []
    rows = []
    for j, b in enumerate(bins):
        rows.append([f"[{b['low']:.0f}, {b['high']:.0f})", str(b["codes_in_bin"]), str(b["probes"])]
                    + [("empty" if not b["probes"] else _pct(data[c][j])) for c in cols])  # fmt: skip
    plot = _freq_plot(confs, bins, root)
    lines = ["## Masked-code accuracy by code frequency", "",
             "One masked code per probe, up to 400 codes per bin of log frequency (ln of the code's share of "
             "pretraining tokens), probes from patients MLM never trained on.", "",
             table(["log frequency", "codes", "probes"] + cols, rows)]  # fmt: skip
    if plot:
        lines += ["", f"![top-100 accuracy by frequency bin]({plot})"]
    return lines + [""]


def _freq_plot(confs: dict[str, Any], bins: list[dict], root: Path) -> str | None:
    from ontology_compiler.extras import MissingExtraError, require

    try:
        require("matplotlib").use("Agg")
        plt = require("matplotlib.pyplot")
    except MissingExtraError as e:  # the report is written without its figure
        log.warning("%s", e)
        return None
    x = [(b["low"] + b["high"]) / 2 for b in bins]
    fig, ax = plt.subplots(figsize=(6, 3.5), dpi=110)
    for k, c in confs.items():
        fb = [ev.get("frequency_bins", []) for ev in c["evals"] if ev.get("frequency_bins")]
        y = [mean_ci([run[j].get("top100") for run in fb]).mean for j in range(len(bins))]
        ax.plot(x, [100 * v for v in y], marker="o", label=k)
    ax.set_xlabel("log frequency bin centre")
    ax.set_ylabel("top-100 accuracy (%)")
    ax.legend()
    fig.tight_layout()
    (root / "plots").mkdir(exist_ok=True)
    fig.savefig(root / "plots" / "frequency_bins.png")
    plt.close(fig)
    return "plots/frequency_bins.png"


def _neighbour_section(confs: dict[str, Any], control: str) -> list[str]:
    counts: dict[str, dict[str, tuple[int, int]]] = {}
    for k, c in confs.items():
        g = {}
        for grp in GROUPS:
            rel = sum(
                ev["neighbours"]["groups"].get(grp, {}).get("related", 0)
                for ev in c["evals"]
                if "neighbours" in ev
            )
            tot = sum(
                ev["neighbours"]["groups"].get(grp, {}).get("total", 0)
                for ev in c["evals"]
                if "neighbours" in ev
            )
            g[grp] = (rel, tot)
        counts[k] = g
    if not counts:
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
    for k, c in confs.items():
        ev = next((e for e in c["evals"] if "neighbours" in e), None)
        cases = ev["neighbours"]["groups"].get("case_studies", {}).get("codes", []) if ev else []
        if cases:
            lines += ["", f"Case studies, `{k}` (seed 0; ✓ related):", ""]
            lines += [f"- **{q['code']}** {q['title']}: " + "; ".join(
                f"{n['code']} {n['title']}{' ✓' if n['related'] else ''}" for n in q["neighbours"]) for q in cases]  # fmt: skip
    return lines + [""]


def _tsne_section(confs: dict[str, Any]) -> list[str]:
    imgs = [
        (k, f"{ev['_dir']}/{ev['tsne']['path']}")
        for k, c in confs.items()
        for ev in c["evals"][:1]
        if ev.get("tsne")
    ]
    if not imgs:
        return []
    lines = ["## Token embeddings (t-SNE, coloured by log frequency)", ""]
    return lines + [f"![{k}]({p})" for k, p in imgs] + [""]


def _cost_section(confs: dict[str, Any]) -> list[str]:
    keys = (
        "embedding_build_s",
        "step_s",
        "build_share",
        "tokens_per_s",
        "sequences_per_s",
        "training_seq_per_s",
        "peak_memory_mb",
    )
    rows = []
    for k, c in confs.items():
        cs = [ev["cost"] for ev in c["evals"] if ev.get("cost")]
        if not cs:
            continue

        def m(key: str, scale: float = 1.0, fmt: str = "{:.1f}", cs=cs) -> str:
            v = mean_ci([x.get(key) for x in cs]).mean
            return "–" if math.isnan(v) else fmt.format(scale * v)

        rows.append([k, m(keys[0], 1e3, "{:.2f}"), m(keys[1], 1e3), m(keys[2], 100), m(keys[3], fmt="{:.0f}"),
                     m(keys[4]), m(keys[5]), m(keys[6], fmt="{:.0f}"), cs[0].get("device", "")])  # fmt: skip
    if not rows:
        return []
    header = ["configuration", "embedding build (ms)", "step (ms)", "build share (%)", "tokens/s", "seq/s (timed)",
              "seq/s (pretraining log)", "peak memory (MB)", "device"]  # fmt: skip
    return ["## Cost", "", "A training step (forward, backward, AdamW) timed on one batch after a warm-up; "
            "peak memory is CUDA max-allocated on a GPU, the process's peak RSS on a CPU.", "", table(header, rows), ""]  # fmt: skip


def headline(data: dict[str, Any]) -> str:
    """Rows = configurations; MLM accuracy and each task's F1 as mean (95 % CI), rare neighbours related."""
    rows = []
    for k, c in data["configurations"].items():
        tr = [t["test"] for ev in c["evals"] for t in ev.get("transfer", [])]
        rood = [t["rood"] for ev in c["evals"] for t in ev.get("rood", [])]
        rare = [ev["neighbours"]["groups"].get("rare", {}) for ev in c["evals"] if "neighbours" in ev]
        rel, tot = sum(g.get("related", 0) for g in rare), sum(g.get("total", 0) for g in rare)
        rows.append([k, _pct(mean_ci([r.get("val_mlm_acc") for r in c["mlm"]])),
                     _pct(mean_ci([r.get("f1") for r in c["tasks"].get("mortality", [])])),
                     _pct(mean_ci([r.get("f1") for r in c["tasks"].get("chapters", [])])),
                     _pct(mean_ci([r.get("f1") for r in tr])), _pct(mean_ci([r.get("f1") for r in rood])),
                     f"{rel}/{tot}" if tot else "–"])  # fmt: skip
    header = ["configuration", "MLM acc", "mortality F1", "chapters F1", "eICU mortality F1", "ROOD F1",
              "rare-code neighbours related"]  # fmt: skip
    return table(header, rows)


def write_report(root: str | Path) -> Report:
    """Write ``<root>/report.md`` (and ``plots/``) for the experiment in ``root``."""
    root = Path(root)
    data = load_experiment(root)
    exp, confs = data["experiment"], data["configurations"]
    cfg = exp.get("config", {})
    control = exp.get("control", "unstructured")
    head = headline(data)
    lines = [f"# Experiment `{exp.get('name', root.name)}`", "",
             f"Model `{cfg.get('model')}`, configurations {', '.join(f'`{c}`' for c in confs)} "
             f"(control `{control}`), {cfg.get('pretrain_seeds')} pretraining seed(s) x {cfg.get('trials')} "
             f"fine-tuning trial(s) per task. Cells: mean over trials, in %, with the bootstrap 95 % interval "
             "in parentheses.", "", "## Headline", "", head, ""]  # fmt: skip
    lines += _metric_section("Masked-code modelling (pretraining validation)", {k: c["mlm"] for k, c in confs.items()},
                             MLM_METRICS, control, "One value per pretraining run (last validation).")  # fmt: skip
    for task, title in (
        ("mortality", "Mortality within 6 months (test)"),
        ("chapters", "Disease chapters, multi-label (test; macro)"),
    ):
        vals = {k: c["tasks"].get(task, []) for k, c in confs.items()}
        lines += _metric_section(title, vals, CLS_METRICS, control, "One value per fine-tuning trial.")
    tr = {k: [t["test"] for ev in c["evals"] for t in ev.get("transfer", [])] for k, c in confs.items()}
    lines += _metric_section("eICU-layout transfer of the mortality models (test)", tr, CLS_METRICS, control,
                             "Mortality models fine-tuned on the MIMIC-layout dataset, scored on the eICU-layout test split.")  # fmt: skip
    lines += _rood_section(confs, control)
    lines += _freq_section(confs, root)
    lines += _neighbour_section(confs, control)
    lines += _tsne_section(confs)
    lines += _cost_section(confs)
    lines += ["## Provenance", "",
              f"program `{_first(confs, 'program_id')}`, dataset `{_first(confs, 'dataset_id')}`, "
              f"transfer dataset `{_first(confs, 'transfer_dataset_id')}`; versions "
              + ", ".join(f"{k} {v}" for k, v in exp.get("versions", {}).items() if k in ("torch", "hrrbert", "python"))
              + f"; started {exp.get('created_at')}, finished {exp.get('finished_at', 'not yet')}.", ""]  # fmt: skip
    path = root / REPORT_FILE
    path.write_text("\n".join(lines), encoding="utf-8")
    return Report(path, head)


def _first(confs: dict[str, Any], key: str) -> str:
    for c in confs.values():
        for ev in c["evals"]:
            if ev.get(key):
                return str(ev[key])
    return "–"
