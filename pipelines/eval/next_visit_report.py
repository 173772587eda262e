"""The next-visit evaluation in the experiment report: :func:`next_visit_section` (its Markdown, and its
part of ``results.json`` under ``next_visit``).

Per configuration: recall@10/20/30 averaged over test patients, recall@20 pooled over true categories and
per frequency quintile, and recall@20 of the ROOD-unseen patients; one pretraining seed with its
patient-bootstrap intervals, several with the Student-t interval over seeds. The baselines (frequency prior,
the history's categories, co-occurrence) and the demo's ceiling are rows beside them: they depend on the
dataset only, so every run's evaluation computed the same ones and the first run's are shown. Then the
model minus each baseline at recall@20, a paired patient bootstrap per seed.
"""

from __future__ import annotations

from typing import Any

from . import values as V
from .markdown import table
from .next_visit_scores import KS, N_QUINTILES, QUINTILE_K
from .records import NextVisit, NextVisitScores
from .sections import OVER_SEEDS, SectionInputs, pct
from .stats import Interval, bootstrap_method

__all__ = ["next_visit_section"]

SCORER_NAMES = {"frequency_prior": "frequency prior", "history": "history's categories",
                "cooccurrence": "co-occurrence", "ceiling": "ground-truth ceiling"}  # fmt: skip
DEFINITION = (
    "recall@k: per patient the share of its last visit's categories among the k ranked first, averaged over "
    "patients; pooled: the share of all true categories of all patients found in the top k (GRAM's "
    "accuracy@k as its figure 2 pools a group of codes); quintile: pooled over the true categories of one "
    "quintile of the test patients' target categories by their count in pretrain_train visits"
)


def _history_text(head: dict) -> str:
    """The ``history``, ``copy`` or ``decoder`` head's addition to the model's description (nothing for
    the linear head)."""
    w = head.get("history_weights")
    if head.get("kind") not in ("history", "copy", "decoder") or not w:
        return ""

    def listed(v) -> str:
        return " / ".join(f"{x:.2f}" for x in (v if isinstance(v, list) else [v]))

    text = (
        " plus the history's own categories, each category's logit adding w_visits · log1p(history visits "
        "holding it) + w_latest · [in the latest history visit], one pair of weights per frequency band of "
        f"the categories (rarest first: w_visits {listed(w['visits'])}, w_latest {listed(w['latest'])}; "
        f"first run's weights); it also ranks the categories seen only in pretraining "
        f"({head.get('outputs_without_training_target', 0):,} of its {head.get('outputs', 0):,})"
    )
    if head.get("kind") == "decoder" and "decoder" in w:
        text += (
            "; each logit also adds w_decoder · the pretrained decoder's log probability of the category at "
            f"a [MASK] opening a new visit (w_decoder {listed(w['decoder'])})"
        )
    c = head.get("copy_weights")
    if head.get("kind") in ("copy", "decoder") and c:
        text += (
            "; that softmax is mixed with a copy distribution over the history's categories (their logits "
            f"v · log1p(visits) + l · latest + p · log prior per band: v {listed(c['visits'])}, l "
            f"{listed(c['latest'])}, p {listed(c['log_prior'])}), the copy share set per patient by a gate "
            f"on the pooled states (mean {100 * float(head.get('copy_share_val', 0.0)):.0f} % on "
            "finetune_val)"
        )
    return text + f" (`--next-visit-head {head.get('kind')}`)"


def _interval(sc: NextVisitScores | None, name: str) -> Interval | None:
    """Cell ``name`` (``recall@20``, ``pooled@20``, ``q3@20``) of one ranking: its bootstrap interval, or the
    point estimate where none was drawn."""
    if sc is None or not sc.n:
        return None
    d = sc.intervals.get(name)
    if d is not None and d.get("estimate") is not None:
        nan = float("nan")
        low, high = (nan if d.get(x) is None else float(d[x]) for x in ("low", "high"))
        return Interval(float(d["estimate"]), low, high, int(d.get("n") or sc.n), d.get("method", ""), "")
    kind, k = name.split("@")
    if kind == "recall" or kind == "pooled":
        v = getattr(sc, kind).get(k)
    else:
        qs = sc.quintiles.get(k) or []
        q = int(kind[1:]) - 1
        v = qs[q] if q < len(qs) else None
    return None if v is None else Interval(float(v), float("nan"), float("nan"), sc.n, "point estimate")


COLUMNS = (
    [("test", f"recall@{k}") for k in KS]
    + [("test", f"pooled@{QUINTILE_K}")]
    + [("test", f"q{q + 1}@{QUINTILE_K}") for q in range(N_QUINTILES)]
    + [("rood_unseen", f"recall@{QUINTILE_K}")]
)


def _row(recs: list[NextVisit | None], scorer: str) -> list[Interval | None]:
    """The cells of ``scorer`` over the runs ``recs`` (one seed: its intervals; several: t over seeds)."""
    return [
        V.over_seeds([_interval(r.score(scorer, g), name) if r is not None else None for r in recs])
        for g, name in COLUMNS
    ]


def _quintile_text(rec: NextVisit) -> str:
    parts = [
        f"Q{q['quintile']} {q['low']:,}–{q['high']:,} visits ({q['categories']} categories)"
        for q in rec.quintiles
    ]
    return "; ".join(parts)


def next_visit_section(s: SectionInputs) -> list[str]:
    """The next-visit diagnoses section (module docstring); adds ``next_visit`` to results.json."""
    recs = s.records
    first = next((r for rs in recs.values() for r in rs if r is not None), None)
    if first is None:
        return []
    header = (
        ["model", "seeds"]
        + [f"recall@{k}" for k in KS]
        + [f"pooled@{QUINTILE_K}"]
        + [f"Q{q + 1} @{QUINTILE_K}" for q in range(N_QUINTILES)]
        + [f"ROOD-unseen recall@{QUINTILE_K}"]
    )
    rows, results = [], {"configurations": {}, "baselines": {}}
    for k, rs in recs.items():
        if not any(r is not None for r in rs):
            continue
        cells = _row(rs, "model")
        rows.append([k, str(sum(r is not None for r in rs))] + [pct(c) for c in cells])
        results["configurations"][k] = _as_results(cells)
    for scorer, name in SCORER_NAMES.items():
        if scorer not in first.scores:
            continue
        cells = _row([first], scorer)
        rows.append([f"baseline: {name}" if scorer != "ceiling" else name, "–"] + [pct(c) for c in cells])
        results["baselines"][scorer] = _as_results(cells)
    test = first.score("model", "test")
    unseen = first.score("model", "rood_unseen")
    head = first.head
    ceiling = (
        "The ceiling ranks by the generator's true probability of each category in the last visit given the "
        "patient's latent state (`ground_truth/next_visit_probabilities.parquet`): it maximises the expected "
        "number of true categories in the top k, so on pooled recall no ranking from the history beats it in "
        "expectation (on recall averaged over patients it is near, not provably at, the optimum)."
        if first.ceiling
        else f"No ceiling: {first.ceiling_note or 'none computed'}."
    )
    lines = [
        f"## Next-visit diagnoses (top-k recall, {test.n if test else 0} test patients)",
        "",
        "Predict the ICD categories of a patient's last visit (ICD-10-CM three-character categories, "
        f"ICD-9-CM codes in their own categories, {first.categories:,} in all) from the visits before it. "
        "The model is a linear softmax layer on the frozen pretrained encoder's [CLS] and mean final states "
        f"({head.get('outputs', '?')} outputs: the categories of some training patient's last visit)"
        f"{_history_text(head)}, "
        f"trained with Adam on {head.get('train_patients', '?')} `finetune_train` patients and stopped by "
        f"the loss on {head.get('val_patients', '?')} `finetune_val` patients (first run: best epoch "
        f"{head.get('best_epoch', '?')} of {head.get('epochs_run', '?')}). {DEFINITION}. "
        f"Quintiles (pretraining visits holding the category): {_quintile_text(first)}. ROOD-unseen: "
        f"{unseen.n if unseen else 0} patients whose codes are mostly held out. Intervals: one pretraining "
        f"seed, {bootstrap_method()} of the scored patients; several seeds, {OVER_SEEDS}. Baselines on the "
        "same patients: the frequency prior (categories of the training patients' last visits), the "
        "history's categories (by visits, then recency, topped up by the prior) and co-occurrence "
        "(P(category next | category now) over the pretraining patients' consecutive visits, summed over "
        f"the history's categories). {ceiling}",
        "",
        table(header, rows),
    ]
    drows = []
    diffs: dict[str, Any] = {}
    for k, rs in recs.items():
        for seed, r in zip((run.seed for run in s.exp.configurations.get(k, [])), rs, strict=False):
            if r is None:
                continue
            for group, by in r.differences.items():
                for name, d in by.items():
                    iv = Interval(
                        float(d["estimate"]) if d.get("estimate") is not None else float("nan"),
                        float("nan") if d.get("low") is None else float(d["low"]),
                        float("nan") if d.get("high") is None else float(d["high"]),
                        int(d.get("n") or 0),
                        d.get("method", ""),
                    )
                    baseline = SCORER_NAMES.get(name.split(" - ")[-1], name)
                    drows.append([f"{k} − {baseline}", group, f"seed {seed}", pct(iv, signed=True)])
                    diffs.setdefault(k, {}).setdefault(str(seed), {}).setdefault(group, {})[name] = d
    if drows:
        lines += [
            "",
            f"recall@{QUINTILE_K}, the model minus each baseline on the same patients (points; paired "
            f"{bootstrap_method()}):",
            "",
            table(["difference", "patients", "seed", f"recall@{QUINTILE_K} difference"], drows),
        ]
    results.update(
        {
            "definition": DEFINITION,
            "method": {"one_seed": bootstrap_method(), "over_seeds": OVER_SEEDS},
            "quintiles": first.quintiles,
            "ceiling": first.ceiling,
            "ceiling_note": first.ceiling_note,
            "differences": diffs,
        }
    )
    s.results["next_visit"] = results
    return lines + [""]


def _as_results(cells: list[Interval | None]) -> dict[str, Any]:
    return {
        ("rood_unseen_" if g == "rood_unseen" else "") + name: (c.as_dict() if c is not None else None)
        for (g, name), c in zip(COLUMNS, cells, strict=True)
    }
