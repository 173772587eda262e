"""The comparison grid of issue 7 and its Markdown report: :func:`compare`.

Memory networks on the clinical QA set generated from a tokenized dataset: MemN2N with plain vs HRR code
embeddings (overall and unseen-code accuracy), hops 1-3, each tying scheme, hard-attention MemNN vs
MemN2N; then the visit Transformer vs BERT on mortality and chapters (both fine-tuned from the same
briefly pretrained tiny BERT; the visit Transformer takes its code embedding).

The memory-network grid runs over data seeds (each draws its own QA set: patients, held-out codes,
questions) and training seeds; a run is one (data seed, training seed, configuration) and writes its own
folder ``<out>/runs/<name>-data<d>-seed<s>``; a run whose ``results.json`` exists is read back instead of
retrained, so an interrupted comparison resumes. Tables give the mean over runs with a 95 % t-interval
over runs and each run's value; HRR is compared with the plain table run by run ("HRR better in k of n
runs"), and a sentence is written only for a difference that holds in every run. Parameter counts and
wall times are in every table; the fine-tuning section is one training seed.
"""

from __future__ import annotations

import json
import logging
import math
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from pipelines.data.tasks import TASKS
from pipelines.eval.markdown import format_cell, table
from pipelines.eval.seeds import claim, parse_seeds, wins
from pipelines.eval.stats import t_interval

from .data import QAOptions, generate_qa

log = logging.getLogger(__name__)

# (table, run name, train_qa options)
QA_GRID: list[tuple[str, str, dict[str, Any]]] = [
    ("embedding", "memn2n-plain-h3-adjacent", dict(embedding="plain")),
    ("embedding", "memn2n-hrr-h3-adjacent", dict(embedding="hrr")),
    ("hops", "memn2n-plain-h1-adjacent", dict(embedding="plain", hops=1)),
    ("hops", "memn2n-plain-h2-adjacent", dict(embedding="plain", hops=2)),
    ("hops", "memn2n-hrr-h1-adjacent", dict(embedding="hrr", hops=1)),
    ("hops", "memn2n-hrr-h2-adjacent", dict(embedding="hrr", hops=2)),
    ("tying", "memn2n-plain-h3-layerwise", dict(embedding="plain", tying="layerwise")),
    ("tying", "memn2n-plain-h3-none", dict(embedding="plain", tying="none")),
    ("tying", "memn2n-hrr-h3-layerwise", dict(embedding="hrr", tying="layerwise")),
    ("tying", "memn2n-hrr-h3-none", dict(embedding="hrr", tying="none")),
    ("attention", "memnn-plain-h2", dict(model="memnn", embedding="plain", hops=2)),
    ("attention", "memnn-hrr-h2", dict(model="memnn", embedding="hrr", hops=2)),
]
FINETUNE_METRICS = ("accuracy", "f1", "auroc", "auprc")


TABLES = ("embedding", "hops", "tying", "attention")
SECTIONS = [  # (grid table, report section, its rows)
    (
        "embedding",
        "MemN2N: plain vs HRR code embeddings",
        ["memn2n-plain-h3-adjacent", "memn2n-hrr-h3-adjacent"],
    ),
    (
        "hops",
        "MemN2N: hops 1-3 (adjacent tying)",
        [f"memn2n-{e}-h{h}-adjacent" for e in ("plain", "hrr") for h in (1, 2, 3)],
    ),
    (
        "tying",
        "MemN2N: weight tying (3 hops)",
        [f"memn2n-{e}-h3-{t}" for e in ("plain", "hrr") for t in ("adjacent", "layerwise", "none")],
    ),
    (
        "attention",
        "Hard-attention MemNN (supporting-fact supervision) vs MemN2N",
        ["memnn-plain-h2", "memn2n-plain-h2-adjacent", "memnn-hrr-h2", "memn2n-hrr-h2-adjacent"],
    ),
]
RUN_METRICS = (("test accuracy", "accuracy"), ("unseen-code accuracy", "accuracy_unseen"),
               ("seen-code accuracy", "accuracy_seen"))  # fmt: skip
Key = tuple[int, int]  # (data seed, training seed)


def select_grid(only: Sequence[str] | None = None) -> list[tuple[str, str, dict[str, Any]]]:
    """The :data:`QA_GRID` rows named in ``only`` (run names or table names: embedding, hops, tying,
    attention); all of them when ``only`` is empty. Raises ``ValueError`` on an unknown name."""
    if not only:
        return list(QA_GRID)
    known = {n for _, n, _ in QA_GRID} | set(TABLES)
    unknown = sorted(set(only) - known)
    if unknown:
        raise ValueError(
            f"--only: unknown {unknown}; expected run names {[n for _, n, _ in QA_GRID]} or tables "
            f"{list(TABLES)}"
        )
    return [row for row in QA_GRID if row[0] in only or row[1] in only]


def run_id(name: str, data_seed: int, seed: int) -> str:
    """The folder of one run under ``<out>/runs``."""
    return f"{name}-data{data_seed}-seed{seed}"


def _qa_run(qa: Path, program: Path, runs: Path, rid: str, opts: dict[str, Any]) -> dict[str, Any]:
    from .train import train_qa

    res = runs / rid / "results.json"
    if res.is_file():
        return json.loads(res.read_text(encoding="utf-8"))
    started = (runs / rid / "config.json").is_file()  # killed before its results: continue it
    return train_qa(qa, program, out=runs, run_id=rid, progress=False, resume=started, **opts).results


def _qa_row(name: str, rs: dict[Key, dict[str, Any]]) -> list[Any]:
    r0 = next(iter(rs.values()))
    c = r0["config"]
    cells = [
        format_cell(t_interval([r[split][k] for r in rs.values()]))
        for split, k in (
            ("val", "accuracy"),
            ("test", "accuracy"),
            ("test", "accuracy_unseen"),
            ("test", "accuracy_seen"),
        )
    ]
    return [
        name,
        c["model"],
        c["embedding"],
        c["hops"],
        c["tying"] if c["model"] == "memn2n" else "-",
        f"{r0['parameters']:,}",
        len(rs),
        *cells,
        f"{np.mean([r['wall_s'] for r in rs.values()]):.0f}",
    ]


QA_HEADER = ["run", "model", "codes", "hops", "tying", "params", "runs", "val acc", "test acc", "unseen acc",
             "seen acc", "wall s / run"]  # fmt: skip


def compare(
    dataset: str | Path,
    program: str | Path,
    *,
    out: str | Path = "artifacts/runs/qa-compare",
    epochs: int = 4,
    max_train: int = 3000,
    dim: int = 32,
    finetune_epochs: int = 3,
    pretrain_steps: int = 60,
    skip_finetune: bool = False,
    qa_options: QAOptions | None = None,
    threads: int | None = 1,
    seeds: int | str | Sequence[int] = 1,
    data_seeds: int | str | Sequence[int] | None = None,
    only: Sequence[str] | None = None,
    device: str = "cpu",
) -> Path:
    """Run the grid on ``dataset`` (tokenized against ``program``) and write ``<out>/report.md``.

    ``seeds``: training seeds (a count: 0..n-1, or a list); ``data_seeds``: seeds of the generated QA sets
    (a count or a list; default: the seed of ``qa_options``); ``only``: run or table names to keep
    (:func:`select_grid`). ``threads``: torch intra-op threads while it runs (1 by default: these models
    are small, and several threads on a shared CPU stall each other, which made wall times 10-20x worse
    here); None leaves it. ``device``: where every model of the grid trains and is evaluated (auto, cpu,
    cuda; the pretraining and fine-tuning of the last section too).
    """
    import torch

    opts = qa_options or QAOptions()
    plan = Plan(
        parse_seeds(seeds, "seeds"),
        [opts.seed] if data_seeds is None else parse_seeds(data_seeds, "data seeds"),
        select_grid(only),
    )
    before = torch.get_num_threads()
    if threads:
        torch.set_num_threads(threads)
    try:
        return _compare(
            dataset,
            program,
            out,
            epochs,
            max_train,
            dim,
            finetune_epochs,
            pretrain_steps,
            skip_finetune,
            opts,
            plan,
            device,
        )
    finally:
        torch.set_num_threads(before)


@dataclass(frozen=True)
class Plan:
    """What one comparison runs: training seeds, data seeds, grid rows."""

    seeds: list[int]
    data_seeds: list[int]
    grid: list[tuple[str, str, dict[str, Any]]]

    def keys(self) -> list[Key]:
        return [(d, s) for d in self.data_seeds for s in self.seeds]


def _compare(
    dataset,
    program,
    out,
    epochs,
    max_train,
    dim,
    finetune_epochs,
    pretrain_steps,
    skip_finetune,
    opts: QAOptions,
    plan: Plan,
    device: str,
) -> Path:
    t0 = time.perf_counter()
    out, program = Path(out), Path(program)
    runs = out / "runs"
    qas = {
        d: generate_qa(dataset, program, out=out / "qa", options=replace(opts, seed=d)).path
        for d in plan.data_seeds
    }
    base = dict(epochs=epochs, max_train=max_train, dim=dim, device=device)
    results: dict[str, dict[Key, dict[str, Any]]] = {}
    for _, name, o in plan.grid:
        for d, s in plan.keys():
            r = _qa_run(qas[d], program, runs, run_id(name, d, s), base | o | {"seed": s})
            results.setdefault(name, {})[(d, s)] = r
            log.info("%s data seed %d seed %d: test accuracy %.3f", name, d, s, r["test"]["accuracy"])
    parts = _introduction(qas, plan, epochs, max_train, dim)

    tags = {t for t, _, _ in plan.grid}
    for tag, title, names in SECTIONS:
        if tag in tags and (names := [n for n in names if n in results]):
            parts.extend(["", f"## {title}", "", table(QA_HEADER, [_qa_row(n, results[n]) for n in names])])
    parts.extend(hrr_vs_plain(results))
    parts.extend(_per_run(results, plan))
    types = sorted({t for rs in results.values() for r in rs.values() for t in r["test"]["by_type"]})
    rows = [
        [n] + [t_interval([r["test"]["by_type"].get(t) for r in rs.values()]).estimate for t in types]
        for n, rs in results.items()
    ]
    parts.extend(
        ["", "## Test accuracy per question type (mean over runs)", "", table(["run", *types], rows)]
    )
    parts.extend(_attention(results, runs, qas, program, device))
    if not skip_finetune:
        parts.extend(
            ["", *_finetune_section(dataset, program, runs, finetune_epochs, pretrain_steps, device)]
        )
    parts.extend(
        [
            "",
            f"Total wall time: {time.perf_counter() - t0:.0f} s on this machine (runs already present are "
            "reused).",
        ]
    )
    path = out / "report.md"
    out.mkdir(parents=True, exist_ok=True)
    flat = {run_id(n, d, s): r for n, rs in results.items() for (d, s), r in rs.items()}
    _write_atomic(out / "results.json", json.dumps(flat, indent=2, default=str) + "\n")
    _write_atomic(path, "\n".join(parts) + "\n")
    return path


def _write_atomic(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text, encoding="utf-8")
    tmp.replace(path)


def _introduction(qas: dict[int, Path], plan: Plan, epochs: int, max_train: int, dim: int) -> list[str]:
    sets = []
    for d, qa in qas.items():
        m = json.loads((qa / "manifest.json").read_text(encoding="utf-8"))
        q = m["counts"]["questions"]

        def total(prefix: str, q=q) -> int:
            return sum(v for k, v in q.items() if k.startswith(prefix))

        sets.append(
            f"data seed {d}: `{qa}` (program `{m['program_id']}`, dataset `{m['source_dataset_id']}`), "
            f"{total('train/')} train, {total('val/')} val, {total('test/')} test questions, "
            f"{total('test_unseen/')} of them on held-out codes ({len(m['held_out_codes'])} codes held out)"
        )
    n = len(plan.keys())
    return [
        "# Memory networks and the visit Transformer on HRR embeddings (issue 7)",
        "",
        "QA sets, one per data seed (each draws its own patients, held-out codes and questions): "
        + "; ".join(sets)
        + ".",
        "",
        f"Training: {epochs} epochs on at most {max_train} train questions, D = {dim}, best validation epoch "
        f"kept. Each configuration runs on data seeds {plan.data_seeds} x training seeds {plan.seeds} = {n} "
        f"run(s); what varies between runs: the QA set (data seed) and the initialization and batch order "
        f"(training seed). Cells: mean over the runs with a 95 % t-interval over runs "
        f"({'no interval: one run' if n < 2 else f'{n - 1} degree(s) of freedom'}).",
    ]


def hrr_vs_plain(results: dict[str, dict[Key, dict[str, Any]]]) -> list[str]:
    """Each HRR configuration against its plain twin, run by run: ``HRR better in k of n runs`` with the
    range of the differences per metric, then the claims that hold in every run."""
    rows, claims = [], []
    for name in results:
        twin = name.replace("-hrr-", "-plain-")
        if "-hrr-" not in name or twin not in results:
            continue
        for label, key in RUN_METRICS:
            w = wins(
                {k: r["test"][key] for k, r in results[name].items()},
                {k: r["test"][key] for k, r in results[twin].items()},
            )
            rows.append([name, label, t_interval(w.diffs), f"HRR better in {w.cell()}"])
            if (c := claim(f"`{name}`", f"`{twin}`", label, w)) is not None:
                claims.append(f"- {c}")
    if not rows:
        return []
    return [
        "",
        "## HRR vs plain code embeddings, run by run",
        "",
        "HRR minus its plain twin (same model, hops, tying) on the same QA set and training seed; the "
        "interval is the t-interval of the per-run differences.",
        "",
        table(["HRR run", "metric", "mean difference", "runs"], rows),
        "",
        *(
            ["Holds in every run:", "", *claims]
            if claims
            else ["No HRR-vs-plain difference holds in every run."]
        ),
    ]


def _per_run(results: dict[str, dict[Key, dict[str, Any]]], plan: Plan) -> list[str]:
    keys = plan.keys()
    header = ["run", "metric", *[f"d{d}/s{s}" for d, s in keys]]
    rows = [
        [n, label, *[rs[k]["test"][key] if k in rs else None for k in keys]]
        for n, rs in results.items()
        for label, key in RUN_METRICS[:2]
    ]
    return [
        "",
        "## Test and unseen-code accuracy per run (d: data seed, s: training seed)",
        "",
        table(header, rows),
    ]


def _attention(results, runs: Path, qas: dict[int, Path], program: Path, device: str) -> list[str]:
    from .train import evaluate_qa

    name = next((n for n in ("memn2n-hrr-h3-adjacent", *results) if n in results and "memn2n-hrr" in n), None)
    if name is None:
        return []
    d, s = next(iter(results[name]))
    _, text = evaluate_qa(runs / run_id(name, d, s), qas[d], program, device=device)
    return [
        "",
        f"## Attention per hop (`{name}`, data seed {d}, seed {s}; one test patient)",
        "",
        "```",
        text,
        "```",
    ]


def _finetune_section(dataset, program: Path, runs: Path, epochs: int, steps: int, device: str) -> list[str]:
    from pipelines.train.finetune import finetune
    from pipelines.train.pretrain import pretrain, resumable

    t = time.perf_counter()
    pre = runs / "pretrain-tiny-base"
    if not (pre / "model" / "config.json").is_file():
        pretrain(
            dataset,
            program,
            out=runs,
            run_id=pre.name,
            resume=resumable(pre),
            model="tiny",
            mode="base",
            max_steps=steps,
            batch_size=64,
            device=device,
            progress=False,
            val_every=0,
            max_val=200,
        )
        (pre / "compare_wall.json").write_text(json.dumps({"wall_s": time.perf_counter() - t}))
    pre_wall = pre / "compare_wall.json"
    pre_s = json.loads(pre_wall.read_text())["wall_s"] if pre_wall.is_file() else float("nan")
    rows = []
    for task in TASKS:
        for model in ("bert", "visit-transformer"):
            name = f"finetune-{task}-{model}"
            summary = runs / name / "summary.json"
            wall_file = runs / name / "compare_wall.json"
            if summary.is_file():
                trial = json.loads(summary.read_text(encoding="utf-8"))["trials"][0]
                wall = json.loads(wall_file.read_text())["wall_s"] if wall_file.is_file() else float("nan")
            else:
                t = time.perf_counter()
                trial = finetune(
                    pre,
                    dataset,
                    program,
                    out=runs,
                    run_id=name,
                    task=task,
                    model=model,
                    resume=(runs / name / "config.json").is_file(),
                    epochs=epochs,
                    batch_size=32,
                    lr=5e-4,
                    device=device,
                    progress=False,
                ).trials[0]
                wall = time.perf_counter() - t
                wall_file.write_text(json.dumps({"wall_s": wall}), encoding="utf-8")
            params = _params(runs / name / "trial-0" / "model" / "model.safetensors")
            m = trial["test"] or trial["val"]
            rows.append(
                [
                    task,
                    model,
                    f"{params:,}",
                    *[m.get(k, float("nan")) for k in FINETUNE_METRICS],
                    trial["best_epoch"],
                    "n/a" if math.isnan(wall) else f"{wall:.0f}",
                ]
            )
    return [
        "## Visit Transformer vs BERT (mortality, chapters)",
        "",
        f"Both start from the same tiny HRR BERT (mode base) pretrained for {steps} steps ({pre_s:.0f} s); "
        f"the visit Transformer (sum pooling, same widths and depth) takes its code embedding. Fine-tuning: "
        f"{epochs} epochs, batch 32, lr 5e-4, best validation F1; test metrics (chapters: macro over the 22 "
        "labels as `multilabel_metrics` reports them).",
        "",
        table(["task", "model", "params", *FINETUNE_METRICS, "best epoch", "wall s"], rows),
    ]


def _params(weights: Path) -> int:
    from safetensors import safe_open

    with safe_open(str(weights), framework="pt") as f:
        return sum(math.prod(f.get_slice(k).get_shape()) for k in f.keys())
