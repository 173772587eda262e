"""The sections of the experiment report: the fine-tuned tasks' tables and the section of each evaluation.

:mod:`pipelines.eval.report` writes the fixed parts (introduction, headline, masked-code modelling, the
test-split tasks, provenance) and, between them, the section of every evaluation of the registry
(:mod:`pipelines.eval.registry`), each a function of :class:`SectionInputs` returning Markdown lines: the
transfer task, ROOD, frequency bins, neighbours, unbinding recall, t-SNE, cost (the next-visit section is
:mod:`pipelines.eval.next_visit_report`'s). A section reads its
evaluation's typed records (:mod:`pipelines.eval.records`), never ``evaluation.json`` keys; the ROOD and
transfer sections read the per-patient predictions :mod:`pipelines.eval.gather` loaded. Cells go through
:func:`pipelines.eval.markdown.format_cell` (``percent``) and tables through
:func:`pipelines.eval.markdown.table`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

from . import values as V
from .gather import BASELINE_MODELS, Experiment
from .markdown import format_cell, table
from .stats import Interval, bootstrap_method, compare_over_seeds, finite, fisher

CLS_METRICS = ("accuracy", "precision", "recall", "f1", "auroc")
NAMES = {"accuracy": "acc", "precision": "prec", "recall": "rec", "f1": "F1", "auroc": "AUROC",
         "val_mlm_acc": "MLM top-1", "val_top10": "top-10", "val_top100": "top-100"}  # fmt: skip
BASELINE_NAMES = {"constant": "constant", "logistic_regression": "logistic regression",
                  "history_chapters": "history's chapters regression",
                  "ceiling": "ground-truth ceiling"}  # fmt: skip
MLM_BASELINE_NAMES = {"most_frequent": "most frequent code", "copy_from_history": "copy from history",
                      "cooccurrence": "co-occurrence"}  # fmt: skip
GROUPS = ("case_studies", "common", "rare", "random")
ONE_SEED = bootstrap_method()
OVER_SEEDS = "mean over pretraining seeds with a Student-t 95 % interval over seeds"
INTERVALS = (
    f"one pretraining seed: {ONE_SEED} of the held-out patients, each model the mean over its "
    f"fine-tuning trials on every resample; several seeds: {OVER_SEEDS}"
)
TRANSFER_TITLE = "eICU-layout transfer of the mortality models (test)"
# relation kinds with a column of their own (a program without the ICD hierarchy shows "–" in the last)
UNBINDING_KINDS = ("is_a", "attribute", "description", "icd_hierarchy")

pct = partial(format_cell, percent=True)  # a report cell: the metric in %, its interval in parentheses


@dataclass
class SectionInputs:
    """What an evaluation's report section reads."""

    exp: Experiment
    # configuration -> the evaluation's typed record of each pretraining run, in the order of
    # ``exp.configurations`` (None where the run's evaluation.json has none)
    records: dict[str, list[Any]]
    plots: Path  # the report's plots/ folder
    results: dict[str, Any] = field(default_factory=dict)  # results.json parts a section adds


def p_value(x: Any) -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "–"
    return f"{x:.3g}" if x >= 1e-15 else "<1e-15"


def chance_top100(n: int) -> str:
    """How often a random ranking of ``n`` codes puts a given code among its top 100, in %."""
    return f"{100 * min(100, n) / n:.2f} %"


def tests_lines(exp: Experiment, metrics: list[tuple[str, dict[str, dict[int, float]]]]) -> list[str]:
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
            rows.append(
                [
                    k,
                    label,
                    r["test"] or "none",
                    p_value(r["pvalue"]),
                    f"{100 * r['diff']:+.1f}" if math.isfinite(r["diff"]) else "–",
                    r["note"],
                ]
            )
    if not rows:
        return []
    return [
        "",
        f"Tests over pretraining seeds against `{exp.control}` (paired t when seeds match, Welch "
        "otherwise, Dunnett when every configuration has >= 3 seeds and several are compared; fine-tuning "
        "trials are never treated as replicates):",
        "",
        table(["configuration", "metric", "test", "p", "difference (points)", "note"], rows),
    ]


def task_section(exp: Experiment, task: str, split: str, title: str) -> list[str]:
    """The fine-tuned ``task`` on ``split``: every configuration and baseline, then the tests over seeds."""
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
            rows.append([k, str(len(runs))] + [pct(iv) for iv in ivs])
    if not rows:
        return []
    for m in BASELINE_MODELS:
        ivs = [V.baseline_interval(exp.baselines, m, task, split, x) for x in CLS_METRICS]
        if any(iv is not None for iv in ivs):
            rows.append([f"baseline: {BASELINE_NAMES[m]}", "–"] + [pct(iv) for iv in ivs])
    with_iv = ", ".join(NAMES[m] for m in V.INTERVAL_METRICS[task])
    lines = [
        f"## {title}",
        "",
        f"Intervals on {with_iv}: {INTERVALS}. The other columns are point estimates (the mean over "
        "fine-tuning trials on all patients). `predicts a constant`: the head's probabilities do not vary "
        "across patients (no interval shown: resampling patients cannot make it informative). * no "
        "per-patient predictions (an older experiment): mean over trials, no interval.",
        "",
        table(["model", "seeds"] + [NAMES[m] for m in CLS_METRICS], rows),
    ]
    tests = [
        (NAMES[m], {k: V.per_seed(runs, task, split, m) for k, runs in confs.items()})
        for m in V.INTERVAL_METRICS[task]
    ]
    return lines + tests_lines(exp, tests) + [""]


# ----------------------------------------------------------------------------- the evaluations' sections


def transfer_section(s: SectionInputs) -> list[str]:
    """(c) the mortality models on the second dataset's test split."""
    return task_section(s.exp, "mortality", "transfer", TRANSFER_TITLE)


def rood_section(s: SectionInputs) -> list[str]:
    """(b) chapters F1 seen / ROOD / ROOD-unseen, and each configuration minus the control on the same
    patients (added to results.json as ``rood_differences``)."""
    exp, plots = s.exp, s.plots
    confs, b = exp.configurations, exp.baselines
    splits = ("test", "rood", "rood_unseen")
    ivs: dict[str, dict[str, Interval | None]] = {}
    for k, runs in confs.items():
        ivs[k] = {sp: V.conf_interval(runs, "chapters", sp, "f1") for sp in splits}
    if not any(ivs[k]["rood"] or ivs[k]["rood_unseen"] for k in ivs):
        return []
    for m in BASELINE_MODELS:
        row = {sp: V.baseline_interval(b, m, "chapters", sp, "f1") for sp in splits}
        if row["rood"] or row["rood_unseen"]:
            ivs[f"baseline: {BASELINE_NAMES[m]}"] = row
    n = {sp: V.patients(confs, "chapters", sp) for sp in ("rood", "rood_unseen")}
    rows = [[k] + [pct(v[sp]) for sp in splits] for k, v in ivs.items()]
    lines = [
        "## ROOD: disease chapters of patients with held-out codes",
        "",
        f"Chapters macro-F1 on the test split (seen codes), on `rood` ({n['rood'] or '?'} patients with "
        f"codes no model trained on) and on `rood_unseen` ({n['rood_unseen'] or 'no'} patients whose codes "
        "are mostly held-out). A code no training saw has, in a model saved by this version, what training "
        "settled for it (`untrained_tokens` in the model's `config.json`): an HRR configuration composes it "
        "from trained atoms, with any atom no trained code uses at the mean of its kind; a table row is the "
        f"mean of the trained codes' rows (`add`: zero). Intervals: {INTERVALS}.",
        "",
        table(["model", "seen (test) F1", "ROOD F1", "ROOD-unseen F1"], rows),
    ]
    diffs: dict[str, Any] = {}
    drows = []
    for k in confs:
        if k == exp.control:
            continue
        per, over = V.diff_intervals(exp, k)
        diffs[k] = {
            "per_seed": {str(sd): iv.as_dict() for sd, iv in per.items()},
            "over_seeds": over.as_dict() if over is not None else None,
        }
        drows += [
            [f"{k} − {exp.control}", f"seed {sd}", pct(iv, signed=True), iv.method] for sd, iv in per.items()
        ]
        if over is not None:
            drows.append([f"{k} − {exp.control}", f"{over.n} seeds", pct(over, signed=True), over.method])
    s.results["rood_differences"] = diffs
    if drows:
        lines += [
            "",
            "ROOD-unseen chapters F1, difference against the control on the same patients (points):",
            "",
            table(["difference", "over", "F1 difference", "interval"], drows),
        ]
    bound = ((b.record.get("history_bound") or {}).get("chapters") if b is not None else None) or {}
    if bound.get("splits"):
        s.results["history_bound"] = bound["splits"]
        lines += ["", *history_bound_lines(bound["splits"], b.record)]
    from .plots import rood_plot

    p = rood_plot(ivs, plots / "rood.png")
    if p is not None:
        lines += ["", f"![chapters F1 seen vs unseen](plots/{p.name})"]
    return lines + [""]


def history_bound_lines(splits: dict[str, Any], record: dict[str, Any]) -> list[str]:
    """The history bound of the chapters task (:mod:`pipelines.eval.history_bound`): the chapters regression
    with and without each code's true chronic share, macro AUROC and F1 per split, and what it means."""

    def cell(split: str, metric: str) -> str:
        a, w = splits[split]["counts"][metric], splits[split]["with_truth"][metric]
        return f"{100 * a:.1f} → {100 * w:.1f} ({100 * (w - a):+.1f})"

    ceiling = ((record.get("tasks") or {}).get("chapters") or {}).get("test", {}).get("ceiling", {})
    auc = ceiling.get("auroc")
    names = [sp for sp in ("test", "rood_unseen") if sp in splits]
    latent = f"; the ceiling's test AUROC of {100 * auc:.1f} needs the latent state." if auc else "."
    return [
        "**History bound** (the generator's truth; a baseline, not a model). A model that reads the "
        "codes can beat the history's chapters regression only by what a code says beyond its chapter. "
        "The one such fact the chapters labels follow is the code's chronic share (how likely its "
        "condition is coded again at the last visit); the rest (the patient's body systems, which "
        "conditions are active) is latent. The same regression refitted with every history code's true "
        "chronic share added, chosen the same way:",
        "",
        table(
            ["split", "macro AUROC: counts → with the truth's shares", "macro F1: counts → with the shares"],
            [[sp, cell(sp, "auroc"), cell(sp, "f1")] for sp in names],
        ),
        "",
        "What the truth's own shares add measures the room a reader of the codes has above the chapter "
        "counts on these labels (a linear reader: a model may still find interactions the regression "
        "cannot)" + latent,
    ]


def frequency_section(s: SectionInputs) -> list[str]:
    """(a) masked-code accuracy by code frequency: per bin and configuration, the best MLM baseline."""
    exp, plots, fb = s.exp, s.plots, s.records
    confs = exp.configurations
    bins = next((r.bins for recs in fb.values() for r in recs if r is not None and r.bins), None)
    if not bins:
        return []
    cols, data, ranks, n = [], {}, {}, V.ranked_codes(fb)
    for k in confs:
        for key in ("top10", "top100"):
            cols.append(f"{k} {NAMES['val_' + key]}")
            data[cols[-1]] = [V.bin_interval(fb[k], j, key) for j in range(len(bins))]
        ranks[f"{k} median rank"] = [V.bin_median_rank(fb[k], j) for j in range(len(bins))]
    ranks = {c: v for c, v in ranks.items() if any(x is not None for x in v)}
    best = _best_baseline_bins(exp, len(bins))
    rows = [
        [f"[{b.low:.0f}, {b.high:.0f})", str(b.codes_in_bin), str(b.probes)]
        + [("empty" if not b.probes else pct(data[c][j])) for c in cols]
        + [("–" if v[j] is None else f"{v[j]:,.0f}") for v in ranks.values()]
        + (
            [
                f"{100 * best[j][1]:.1f} ({MLM_BASELINE_NAMES.get(best[j][0], best[j][0])}; "
                f"{best[j][2]} masked)"
                if best[j]
                else "–"
            ]
            if best
            else []
        )
        for j, b in enumerate(bins)
    ]
    from .plots import frequency_plot

    series = {k: data[f"{k} top-100"] for k in confs}
    p = frequency_plot(
        [(b.low, b.high, b.codes_in_bin, b.probes) for b in bins],
        series,
        plots / "frequency_bins.png",
        reference=[x[1] if x else None for x in best] if best else None,
    )
    lines = [
        "## Masked-code accuracy by code frequency",
        "",
        "One masked code per probe, up to 400 codes per bin of log frequency (ln of the code's share of "
        "pretraining tokens), probes from patients MLM never trained on, scored with the model's code cache "
        "when it has one. Intervals: Clopper-Pearson 95 % "
        "over the bin's probes (one seed), "
        + OVER_SEEDS
        + " (several)."
        + (
            " Best baseline: the best MLM baseline's top-100 accuracy on the validation positions masked for "
            "MLM accuracy whose target falls in the bin (other positions than the probes; no interval)."
            if best
            else ""
        )
        + (
            f" Median rank: the probes' median rank of the masked code among all {n:,} codes (1 = first; "
            f"mean over seeds), where a random ranking finds a code among the top 100 {chance_top100(n)} "
            "of the time."
            if ranks
            else ""
        ),
        "",
        table(
            ["log frequency", "codes", "probes"]
            + cols
            + list(ranks)
            + (["best baseline top-100"] if best else []),
            rows,
        ),
    ]
    if p:
        lines += ["", f"![top-100 accuracy by frequency bin](plots/{p.name})"]
    return lines + [""]


def _best_baseline_bins(exp: Experiment, n_bins: int) -> list[tuple[str, float, int] | None]:
    """Per frequency bin the best MLM baseline's (name, top-100, masked positions); [] without them."""
    b = exp.baselines
    bins = ((b.record.get("mlm") or {}).get("frequency_bins") or []) if b is not None else []
    if len(bins) != n_bins:
        return []
    out: list[tuple[str, float, int] | None] = []
    for x in bins:
        acc = {k: v for k, v in (x.get("top100") or {}).items() if finite(v)}
        out.append(
            (max(acc, key=acc.get), acc[max(acc, key=acc.get)], int(x.get("n_masked", 0))) if acc else None
        )
    return out if any(out) else []


def neighbour_section(s: SectionInputs) -> list[str]:
    """(d) related neighbours per group, Fisher's test against the control, the case studies."""
    control, nb = s.exp.control, s.records
    counts = {k: {g: V.rare_neighbours(recs, g) for g in GROUPS} for k, recs in nb.items()}
    if not any(t for g in counts.values() for _, t in g.values()):
        return []
    rows = [
        [k] + [f"{r}/{t}" if t else "–" for r, t in (g[grp] for grp in GROUPS)] for k, g in counts.items()
    ]
    lines = [
        "## Nearest neighbours and the ontology",
        "",
        "Top-4 cosine neighbours of each code judged related when within two is-a steps of the code's "
        "SNOMED concepts or sharing a finding site and an associated morphology (summed over pretraining "
        "seeds).",
        "",
        table(["configuration", "case studies", "common", "rare", "random"], rows),
    ]
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
                cells.append(f"{p_value(two)} / {p_value(one)}")
            prow.append([k] + cells)
        lines += [
            "",
            f"Fisher's exact test against `{control}` (two-sided / one-sided greater):",
            "",
            table(["configuration", "common", "rare", "random"], prow),
        ]
    for k, recs in nb.items():
        rec = next((r for r in recs if r is not None), None)
        cases = rec.group("case_studies").codes if rec else []
        if cases:
            lines += ["", f"Case studies, `{k}` (first seed; ✓ related):", ""]
            lines += [
                f"- **{q.code}** {q.title}: "
                + "; ".join(f"{n['code']} {n['title']}{' ✓' if n['related'] else ''}" for n in q.neighbours)
                for q in cases
            ]
    return lines + [""]


def _mean_of(values: list[Any]) -> float | None:
    """The mean of the finite numbers in ``values`` (None when there are none)."""
    vals = [float(v) for v in values if finite(v)]
    return sum(vals) / len(vals) if vals else None


def unbinding_section(s: SectionInputs) -> list[str]:
    """Per HRR configuration: the HRR dimension and the unbinding recall at top-1 / top-5 (mean over
    pretraining seeds), overall and top-5 per relation kind."""
    rows = []
    for k, recs in s.records.items():
        us = [u for u in recs if u is not None]
        if not us:
            continue

        def top(at: str, kind: str | None = None, us=us) -> float | None:
            parts = [u.recall if kind is None else u.per_kind.get(kind, {}).get("recall", {}) for u in us]
            return _mean_of([p.get(at) for p in parts])

        rows.append(
            [
                k,
                "–" if us[0].dim is None else us[0].dim,
                sum(u.rows for u in us),
                sum(u.edges for u in us),
                top("1"),
                top("5"),
            ]
            + [top("5", kind) for kind in UNBINDING_KINDS]
        )
    if not rows:
        return []
    header = ["configuration", "dimension", "codes", "edges", "top-1", "top-5"] + [
        f"top-5 {kind.replace('_', '-')}" for kind in UNBINDING_KINDS
    ]
    return [
        "## Unbinding recall",
        "",
        "A seeded sample of ICD codes per pretraining seed: each code's trained HRR vector unbound with the "
        "relation of each of its program edges and cleaned up against the trained atoms that relation takes "
        "anywhere in the program (its role's memory: body structures for a finding site); the share of edges "
        "whose atom ranks in the top 1 / top 5 (mean over seeds; codes and edges summed). A relation with m "
        "atoms on one code is m edges ranked against the same query.",
        "",
        table(header, rows),
        "",
    ]


def tsne_section(s: SectionInputs) -> list[str]:
    """(e) the first seed's t-SNE plot of each configuration."""
    imgs = [
        (k, runs[0].eval_dir, s.records[k][0])
        for k, runs in s.exp.configurations.items()
        if runs and s.records[k][0] is not None
    ]
    if not imgs:
        return []
    by_chapter = all(t.coloured_by == "chapter" for _, _, t in imgs)
    what = (
        "coloured by ICD chapter, rare codes (seen 1–3 times in pretraining) marked with black crosses"
        if by_chapter
        else "coloured by log frequency"
    )
    lines = [f"## Token embeddings (t-SNE, {what}; first seed)", ""]
    return lines + [f"![{k}]({d}/{t.path})" for k, d, t in imgs] + [""]


COST_KEYS = ("embedding_build_s", "step_s", "build_share", "tokens_per_s", "sequences_per_s",
             "training_seq_per_s", "peak_memory_mb")  # fmt: skip


def cost_section(s: SectionInputs) -> list[str]:
    """The cost of a training step per configuration (mean over pretraining seeds)."""
    keys, rows = COST_KEYS, []
    for k, recs in s.records.items():
        cs = [c for c in recs if c is not None]
        if not cs:
            continue

        def m(key: str, scale: float = 1.0, fmt: str = "{:.1f}", cs=cs) -> str:
            vals = [getattr(x, key) for x in cs if finite(getattr(x, key))]
            return fmt.format(scale * sum(vals) / len(vals)) if vals else "–"

        rows.append(
            [
                k,
                m(keys[0], 1e3, "{:.2f}"),
                m(keys[1], 1e3),
                m(keys[2], 100),
                m(keys[3], fmt="{:.0f}"),
                m(keys[4]),
                m(keys[5]),
                m(keys[6], fmt="{:.0f}"),
                cs[0].device,
            ]
        )
    if not rows:
        return []
    header = ["configuration", "embedding build (ms)", "step (ms)", "build share (%)", "tokens/s",
              "seq/s (timed)", "seq/s (pretraining log)", "peak memory (MB)", "device"]  # fmt: skip
    return [
        "## Cost",
        "",
        "A training step (forward, backward, AdamW) timed on one batch after a warm-up, mean over "
        "pretraining seeds; peak memory is CUDA max-allocated on a GPU, the process's peak RSS on a CPU.",
        "",
        table(header, rows),
        "",
    ]


def probe_section(s: SectionInputs) -> list[str]:
    """The chapters probe (:mod:`pipelines.eval.probe`): per configuration its test and ROOD-unseen chapters
    F1 (one seed: the patient interval; several: the t interval over seeds), beside the fine-tuned heads and
    the history's chapters regression; adds ``chapters_probe`` to results.json."""
    recs = s.records
    if not any(r is not None for rs in recs.values() for r in rs):
        return []
    exp, b = s.exp, s.exp.baselines
    splits = ("test", "rood_unseen")
    rows, results = [], {}
    for k, rs in recs.items():
        got = [r for r in rs if r is not None]
        if not got:
            continue
        probe = {
            sp: V.over_seeds(
                [Interval.from_dict(r.scores[sp]["f1_interval"]) if r.scores.get(sp) else None for r in got]
            )
            for sp in splits
        }
        tuned = {sp: V.conf_interval(exp.configurations[k], "chapters", sp, "f1") for sp in splits}
        rows.append([f"{k}: probe", str(len(got))] + [pct(probe[sp]) for sp in splits])
        rows.append([f"{k}: fine-tuned", "–"] + [pct(tuned[sp]) for sp in splits])
        results[k] = {sp: probe[sp].as_dict() if probe[sp] is not None else None for sp in splits}
    for m in ("history_chapters", "logistic_regression"):
        row = {sp: V.baseline_interval(b, m, "chapters", sp, "f1") for sp in splits}
        if row["test"] or row["rood_unseen"]:
            rows.append([f"baseline: {BASELINE_NAMES[m]}", "–"] + [pct(row[sp]) for sp in splits])
    first = next(r for rs in recs.values() for r in rs if r is not None)
    s.results["chapters_probe"] = results
    parts = ", ".join(first.features.get("parts") or [])
    return [
        "## Chapters probe: what the frozen pretrained model holds",
        "",
        "A linear read-out of each pretrained model, fine-tuning left out: the learner of the history's "
        "chapters regression (an L2 logistic regression per chapter, C chosen on `finetune_val` by macro "
        "AUROC) on the frozen model's features of each history "
        f"({parts}; {first.features.get('width', '?')} features, standardised on `finetune_train`). "
        "Thresholds per chapter on `finetune_val`. `probe` against `fine-tuned` separates what pretraining "
        "put in from what the fine-tuning recipe gets out; against the regression, it is the same learner "
        f"on the model's features instead of the chapter counts. Chapters macro-F1; intervals: {INTERVALS}.",
        "",
        table(["model", "seeds", "test F1", "ROOD-unseen F1"], rows),
        "",
    ]
