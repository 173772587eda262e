"""What the commands print: pure functions over the results of the training and export APIs (the other
commands print a ``describe`` function of their API module)."""

from __future__ import annotations

import math
from typing import Any

FINETUNE_METRICS = ("accuracy", "precision", "recall", "f1", "auroc", "auprc")


def pretrain_summary(result: Any) -> str:
    """A :class:`pipelines.train.pretrain.PretrainResult`: run folder, steps, last validation."""
    val = ", ".join(f"{k} {v:.4f}" for k, v in result.validation.items() if isinstance(v, float))
    return f"run       {result.run_dir}\nsteps     {result.step}\nvalidation {val}"


def finetune_summary(result: Any) -> str:
    """A :class:`pipelines.train.finetune.FinetuneResult`: per trial its test (else val) metrics."""
    lines = [f"run       {result.run_dir}"]
    for t in result.trials:
        m = t["test"] or t["val"]
        which = "test" if t["test"] else "val"
        vals = ", ".join(f"{k} {_metric(m[k])}" for k in FINETUNE_METRICS if isinstance(m.get(k), float))
        lines.append(f"trial {t['trial']}   {which}: {vals} (best epoch {t['best_epoch']})")
    return "\n".join(lines)


def _metric(x: float) -> str:
    """A metric as printed: four decimals, ``n/a`` where it is undefined (NaN: AUROC of one class)."""
    return f"{x:.4f}" if math.isfinite(x) else "n/a"


def qa_metrics(m: dict[str, Any]) -> str:
    """QA accuracy overall, on unseen codes, per question type (and the questions skipped)."""
    lines = [
        f"accuracy  {m['accuracy']:.4f} overall, {m['accuracy_unseen']:.4f} unseen codes ({m['n_unseen']})"
    ]
    lines += [f"  {t:<16} {a:.4f}" for t, a in m["by_type"].items()]
    if m.get("skipped"):
        lines.append("skipped   " + ", ".join(f"{k} {v}" for k, v in m["skipped"].items()))
    return "\n".join(lines)


def qa_train_summary(result: Any) -> str:
    """A :class:`pipelines.qa.train.QARunResult`: run folder, parameters, test (else val) accuracy."""
    r = result.results
    return f"run       {result.run_dir}\nparams    {r['parameters']:,}\n" + qa_metrics(r["test"] or r["val"])


def d2v_metrics(split: str, m: dict[str, Any]) -> str:
    """One line of Doctor2Vec ranking metrics of a split."""

    def f(x: float | None) -> str:
        return "n/a" if x is None or x != x else f"{x:.4f}"

    return (
        f"{split:<10} PR-AUC {f(m['pr_auc'])}  ROC-AUC {f(m['roc_auc'])}  P@5 {f(m['p_at_5'])}  "
        f"P@10 {f(m['p_at_10'])}  ({m['trials']} trials, {m['pairs']} pairs, {m['positives']} enrolling)"
    )


def d2v_train_summary(result: Any) -> str:
    """A :class:`pipelines.doctor2vec.train.D2VRunResult`: run folder, parameters, metrics per split."""
    from pipelines.doctor2vec.train import EVAL_SPLITS

    r = result.results
    lines = [f"run       {result.run_dir}", f"params    {r['parameters']:,}"]
    lines += [d2v_metrics(s, r[s]) for s in EVAL_SPLITS if s in r]
    return "\n".join(lines)


def owl_summary(result: Any) -> str:
    """An :func:`ontology_compiler.owl_export.export_owl` result: classes, axioms, the file."""
    c = result.counts
    return (
        f"classes   {c.get('ontology_classes', 0):,} ontology classes, {c.get('tokens', 0):,} tokens\n"
        f"axioms    is-a {c.get('is_a', 0):,}, restrictions {c.get('restrictions', 0):,} "
        f"({c.get('role_groups', 0):,} role groups), mappedTo {c.get('mapped_to', 0):,}\n"
        f"owl       {result.path}"
    )


def reports_summary(reports: list[Any]) -> str:
    """:class:`pipelines.eval.report.Report` s: each one's file, then its headline table."""
    return "\n".join(f"report    {r.path}\n\n{r.headline}\n" for r in reports)
