"""The comparison grid of issue 7 and its Markdown report: :func:`compare`.

Memory networks on the clinical QA set generated from a tokenized dataset: MemN2N with plain vs HRR code
embeddings (overall and unseen-code accuracy), hops 1-3, each tying scheme, hard-attention MemNN vs
MemN2N; then the visit Transformer vs BERT on mortality and chapters (both fine-tuned from the same
briefly pretrained tiny BERT; the visit Transformer takes its code embedding). Every run writes its own
folder under ``<out>/runs``; a run whose ``results.json`` exists is read back instead of retrained, so
an interrupted comparison resumes. Parameter counts and wall times are in every table.
"""

from __future__ import annotations

import json
import logging
import math
import time
from pathlib import Path
from typing import Any

from pipelines.data.tasks import TASKS
from pipelines.eval.markdown import table

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


def _qa_run(qa: Path, program: Path, runs: Path, name: str, opts: dict[str, Any]) -> dict[str, Any]:
    from .train import train_qa

    res = runs / name / "results.json"
    if res.is_file():
        return json.loads(res.read_text(encoding="utf-8"))
    started = (runs / name / "config.json").is_file()  # killed before its results: continue it
    return train_qa(qa, program, out=runs, run_id=name, progress=False, resume=started, **opts).results


def _qa_row(name: str, r: dict[str, Any]) -> list[Any]:
    c, t = r["config"], r["test"]
    return [
        name,
        c["model"],
        c["embedding"],
        c["hops"],
        c["tying"] if c["model"] == "memn2n" else "-",
        f"{r['parameters']:,}",
        r["val"]["accuracy"],
        t["accuracy"],
        t["accuracy_unseen"],
        t["accuracy_seen"],
        f"{r['wall_s']:.0f}",
    ]


QA_HEADER = ["run", "model", "codes", "hops", "tying", "params", "val acc", "test acc", "unseen acc",
             "seen acc", "wall s"]  # fmt: skip


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
) -> Path:
    """Run the grid on ``dataset`` (tokenized against ``program``) and write ``<out>/report.md``.

    ``threads``: torch intra-op threads while it runs (1 by default: these models are small, and several
    threads on a shared CPU stall each other, which made wall times 10-20x worse here); None leaves it.
    """
    import torch

    before = torch.get_num_threads()
    if threads:
        torch.set_num_threads(threads)
    try:
        return _compare(dataset, program, out, epochs, max_train, dim, finetune_epochs, pretrain_steps,
                        skip_finetune, qa_options)  # fmt: skip
    finally:
        torch.set_num_threads(before)


def _compare(dataset, program, out, epochs, max_train, dim, finetune_epochs, pretrain_steps, skip_finetune,
             qa_options) -> Path:  # fmt: skip
    t0 = time.perf_counter()
    out, program = Path(out), Path(program)
    runs = out / "runs"
    qa = generate_qa(dataset, program, out=out / "qa", options=qa_options or QAOptions()).path
    base = dict(epochs=epochs, max_train=max_train, dim=dim, device="cpu")
    results: dict[str, dict[str, Any]] = {}
    for _, name, opts in QA_GRID:
        results[name] = _qa_run(qa, program, runs, name, base | opts)
        log.info("%s: test accuracy %.3f", name, results[name]["test"]["accuracy"])
    manifest = json.loads((qa / "manifest.json").read_text(encoding="utf-8"))
    q = manifest["counts"]["questions"]
    parts = [
        "# Memory networks and the visit Transformer on HRR embeddings (issue 7)",
        "",
        f"QA set `{qa}` (program `{manifest['program_id']}`, dataset `{manifest['source_dataset_id']}`): "
        f"{sum(v for k, v in q.items() if k.startswith('train/'))} train, "
        f"{sum(v for k, v in q.items() if k.startswith('val/'))} val, "
        f"{sum(v for k, v in q.items() if k.startswith('test/'))} test questions, "
        f"{sum(v for k, v in q.items() if k.startswith('test_unseen/'))} of them on held-out codes "
        f"({len(manifest['held_out_codes'])} codes held out). Training: {epochs} epochs on at most "
        f"{max_train} train questions, D = {dim}, best validation epoch kept; one seed (0), so differences "
        "of a few points are within noise.",
    ]

    def section(title: str, names: list[str]) -> None:
        parts.extend(["", f"## {title}", "", table(QA_HEADER, [_qa_row(n, results[n]) for n in names])])

    section("MemN2N: plain vs HRR code embeddings", ["memn2n-plain-h3-adjacent", "memn2n-hrr-h3-adjacent"])
    section(
        "MemN2N: hops 1-3 (adjacent tying)",
        [f"memn2n-{e}-h{h}-adjacent" for e in ("plain", "hrr") for h in (1, 2, 3)],
    )
    section(
        "MemN2N: weight tying (3 hops)",
        [f"memn2n-{e}-h3-{t}" for e in ("plain", "hrr") for t in ("adjacent", "layerwise", "none")],
    )
    section(
        "Hard-attention MemNN (supporting-fact supervision) vs MemN2N",
        ["memnn-plain-h2", "memn2n-plain-h2-adjacent", "memnn-hrr-h2", "memn2n-hrr-h2-adjacent"],
    )
    types = sorted({t for r in results.values() for t in r["test"]["by_type"]})
    rows = [[n] + [results[n]["test"]["by_type"].get(t, float("nan")) for t in types] for n in results]
    parts.extend(["", "## Test accuracy per question type", "", table(["run", *types], rows)])
    from .train import evaluate_qa

    _, text = evaluate_qa(runs / "memn2n-hrr-h3-adjacent", qa, program)
    parts.extend(
        ["", "## Attention per hop (MemN2N, HRR codes, 3 hops; one test patient)", "", "```", text, "```"]
    )
    if not skip_finetune:
        parts.extend(["", *_finetune_section(dataset, program, runs, finetune_epochs, pretrain_steps)])
    parts.extend(["", f"Total wall time: {time.perf_counter() - t0:.0f} s on this machine."])
    path = out / "report.md"
    out.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(parts) + "\n", encoding="utf-8")
    (out / "results.json").write_text(json.dumps(results, indent=2, default=str) + "\n", encoding="utf-8")
    return path


def _finetune_section(dataset, program: Path, runs: Path, epochs: int, steps: int) -> list[str]:
    from pipelines.train.finetune import finetune
    from pipelines.train.pretrain import pretrain, resumable

    t = time.perf_counter()
    pre = runs / "pretrain-tiny-base"
    if not (pre / "model" / "config.json").is_file():
        pretrain(dataset, program, out=runs, run_id=pre.name, resume=resumable(pre), model="tiny", mode="base", max_steps=steps,
                 batch_size=64, device="cpu", progress=False, val_every=0, max_val=200)  # fmt: skip
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
                trial = finetune(pre, dataset, program, out=runs, run_id=name, task=task, model=model,
                                 resume=(runs / name / "config.json").is_file(),
                                 epochs=epochs, batch_size=32, lr=5e-4, device="cpu", progress=False).trials[0]  # fmt: skip
                wall = time.perf_counter() - t
                wall_file.write_text(json.dumps({"wall_s": wall}), encoding="utf-8")
            params = _params(runs / name / "trial-0" / "model" / "model.safetensors")
            m = trial["test"] or trial["val"]
            rows.append([task, model, f"{params:,}", *[m.get(k, float("nan")) for k in FINETUNE_METRICS],
                         trial["best_epoch"], "n/a" if math.isnan(wall) else f"{wall:.0f}"])  # fmt: skip
    return [
        "## Visit Transformer vs BERT (mortality, chapters)",
        "",
        f"Both start from the same tiny HRR BERT (mode base) pretrained for {steps} steps ({pre_s:.0f} s); "
        f"the visit Transformer (sum pooling, same widths and depth) takes its code embedding. Fine-tuning: "
        f"{epochs} epochs, batch 32, lr 5e-4, best validation F1; test metrics (chapters: macro over the 22 labels "
        "as `multilabel_metrics` reports them).",
        "",
        table(["task", "model", "params", *FINETUNE_METRICS, "best epoch", "wall s"], rows),
    ]


def _params(weights: Path) -> int:
    from safetensors import safe_open

    with safe_open(str(weights), framework="pt") as f:
        return sum(math.prod(f.get_slice(k).get_shape()) for k in f.keys())
