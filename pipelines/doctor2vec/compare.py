"""The Doctor2Vec comparison of issue 9 and its Markdown report: :func:`compare`, :func:`write_report`.

Generates (or reuses) the Doctor2Vec data of a tokenized dataset, one data set per data seed, trains the
grid — plain vs HRR code embeddings x dynamic vs static doctor vectors (the paper's ablation), optionally
the visit-Transformer patient encoder — once per (data seed, training seed, configuration), and writes
``<out>/report.md`` with the test trials and the rare-disease trials side by side. Three untrained
references score the same pairs: panel size (popularity), a rule (panel patients carrying one of the
trial's condition codes, what a SQL query over the panel would give) and the generator's own driver
(eligible patients: the ceiling, not a competitor). Cells are means over runs with a 95 % t-interval over
runs; two configurations are compared run by run (a better in k of n runs), and a difference is stated in
words only where it holds in every run. Each run keeps its own folder
``<out>/runs/<name>-data<d>-seed<s>``; a run whose ``results.json`` exists is read back, so an interrupted
comparison resumes, and ``hrrbert report <out>`` rewrites the report from those files alone.
"""

from __future__ import annotations

import json
import logging
import math
import time
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from pipelines.errors import PipelineError
from pipelines.eval.markdown import table
from pipelines.eval.report import EXPERIMENT_FILE, Report, report
from pipelines.eval.report import write_report as write_experiment_report
from pipelines.eval.seeds import claim, parse_seeds, wins
from pipelines.eval.stats import t_interval

from .config import D2VOptions

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
    "hrr-base-dynamic-visits": dict(
        embedding="hrr", hrr_mode="base", doctor="dynamic", patient_encoder="visit-transformer"
    ),
}
SPLIT_TITLES = {
    "test": "Test trials (common conditions)",
    "test_rare": "Rare-disease trials (held-out codes)",
}
METRICS = ("pr_auc", "roc_auc", "p_at_5", "p_at_10", "trial_ap")
PER_RUN_METRICS = ("trial_ap", "roc_auc")  # the per-run table
CONTRAST_METRICS = ("trial_ap", "roc_auc", "pr_auc")  # the run-by-run differences
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
        conds = [
            c
            for c, s in zip(trials["conditions"].to_pylist(), trials["split"].to_pylist(), strict=True)
            if s == split
        ]
        shared = [size[row[x]] > sum(row[y] == row[x] for y in c) for c in conds for x in c]
        out[split] = float(np.mean(shared)) if shared else math.nan
    return out


def select_grid(
    only: Sequence[str] | None = None, visit_transformer: bool = False
) -> dict[str, dict[str, Any]]:
    """The configurations to run: :data:`GRID` (and :data:`VISIT_GRID` with ``visit_transformer``), or the
    named ones of both when ``only`` is given. Raises ``ValueError`` on an unknown name."""
    pool = {**GRID, **VISIT_GRID}
    if not only:
        return {**GRID, **(VISIT_GRID if visit_transformer else {})}
    unknown = sorted(set(only) - set(pool))
    if unknown:
        raise ValueError(f"--only: unknown {unknown}; expected some of {list(pool)}")
    return {n: o for n, o in pool.items() if n in only}


def run_id(name: str, data_seed: int | None, seed: int) -> str:
    """The folder of one run under ``<out>/runs`` (``data_seed`` None: a data folder given with ``data``)."""
    return f"{name}-seed{seed}" if data_seed is None else f"{name}-data{data_seed}-seed{seed}"


def compare(
    dataset: str | Path | None,
    program: str | Path,
    *,
    out: str | Path = "artifacts/runs/doctor2vec-compare",
    data: str | Path | None = None,
    epochs: int = 3,
    dim: int = 64,
    seeds: int | str | Sequence[int] = 1,
    data_seeds: int | str | Sequence[int] | None = None,
    only: Sequence[str] | None = None,
    visit_transformer: bool = False,
    threads: int | None = 1,
    data_options: D2VOptions | None = None,
    device: str = "cpu",
) -> Path:
    """Run the grid once per (data seed, training seed, configuration) and write ``<out>/report.md``.

    ``seeds``: training seeds (a count: 0..n-1, or a list); ``data_seeds``: seeds of the generated
    Doctor2Vec data (doctors, panels, trials, enrollment; a count or a list; default: the seed of
    ``data_options``); ``data``: an existing Doctor2Vec folder instead (one data set, no data seeds);
    ``only``: the configurations to keep (:func:`select_grid`). ``threads``: torch intra-op threads while
    it runs (1 by default: small models on a shared CPU run faster single-threaded). ``device``: where
    every run trains and the report's explained run is evaluated (auto, cpu, cuda)."""
    import torch

    train_seeds = parse_seeds(seeds, "seeds")
    grid = select_grid(only, visit_transformer)
    opts = data_options or D2VOptions()
    if data is not None and data_seeds is not None:
        raise ValueError(
            "data seeds generate one data set each from the dataset; do not give an existing data folder too"
        )
    if data is None and dataset is None:
        raise ValueError("give a tokenized dataset to generate the Doctor2Vec data from, or --data")
    dseeds: list[int | None] = (
        [None]
        if data is not None
        else ([opts.seed] if data_seeds is None else list(parse_seeds(data_seeds, "data seeds")))
    )
    before = torch.get_num_threads()
    if threads:
        torch.set_num_threads(threads)
    try:
        return _compare(
            dataset, program, Path(out), data, epochs, dim, train_seeds, dseeds, grid, opts, device
        )
    finally:
        torch.set_num_threads(before)


def _compare(dataset, program, out: Path, data, epochs, dim, seeds, dseeds, grid, opts, device: str) -> Path:
    from .data import generate_doctor2vec
    from .train import train_doctor2vec

    t0 = time.perf_counter()
    sets = {
        d: Path(data)
        if d is None
        else generate_doctor2vec(dataset, program, out=out / "data", options=replace(opts, seed=d)).path
        for d in dseeds
    }
    runs = out / "runs"
    for name, o in grid.items():
        for d in dseeds:
            for seed in seeds:
                rid = run_id(name, d, seed)
                if not (runs / rid / "results.json").is_file():
                    started = (runs / rid / "config.json").is_file()  # killed: continue it
                    train_doctor2vec(
                        sets[d],
                        program,
                        out=runs,
                        run_id=rid,
                        epochs=epochs,
                        dim=dim,
                        seed=seed,
                        progress=False,
                        resume=started,
                        device=device,
                        **o,
                    )
                    log.info("%s done", rid)
    spec = {
        "data_sets": [{"data_seed": d, "path": str(p)} for d, p in sets.items()],
        "program": str(program),
        "runs": list(grid),
        "seeds": seeds,
        "epochs": epochs,
        "dim": dim,
        "wall_s": time.perf_counter() - t0,
    }
    out.mkdir(parents=True, exist_ok=True)
    _write_atomic(out / COMPARE_FILE, json.dumps(spec, indent=2) + "\n")
    return write_report(out, device=device)


def _write_atomic(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text, encoding="utf-8")
    tmp.replace(path)


def _layout(spec: dict[str, Any]) -> tuple[dict[int | None, Path], list[int]]:
    """Data sets by data seed and the training seeds of a comparison (also of a file written before data
    seeds: one data folder, ``seeds`` a count)."""
    if "data_sets" in spec:
        sets = {d["data_seed"]: Path(d["path"]) for d in spec["data_sets"]}
    else:
        sets = {None: Path(spec["data"])}
    seeds = spec.get("seeds", 1)
    return sets, list(range(seeds)) if isinstance(seeds, int) else [int(s) for s in seeds]


def write_report(root: str | Path, device: str = "cpu") -> Path:
    """(Re)write ``report.md`` of a comparison folder from its ``doctor2vec-compare.json`` and run results
    (``device``: where the explained run is evaluated)."""
    from .read import read_doctor2vec

    root = Path(root)
    spec = json.loads((root / COMPARE_FILE).read_text(encoding="utf-8"))
    sets, seeds = _layout(spec)
    keys = [(d, s) for d in sets for s in seeds]
    results = _read_results(root, spec["runs"], keys)
    reads = {d: read_doctor2vec(p) for d, p in sets.items()}
    first = next(iter(sets))
    parts = _introduction(spec, sets, seeds, reads[first].manifest, results)
    parts += _result_tables(results, {d: reference_scores(ds) for d, ds in reads.items()})
    parts += _per_run(results, keys)
    parts += _contrasts(results)
    parts += _hrr_sharing(shared_hrr_codes(reads[first].trials, spec["program"]), first)
    parts += _rare_trial_explanation(root, results, sets, spec["program"], device)
    parts += [
        "",
        f"Total wall time: {spec['wall_s']:.0f} s on this machine (runs already present are reused).",
    ]
    path = root / REPORT_FILE
    _write_atomic(path, "\n".join(parts) + "\n")
    return path


Key = tuple[int | None, int]  # (data seed, training seed)


def _read_results(root: Path, names: list[str], keys: list[Key]) -> dict[str, dict[Key, dict]]:
    """Run name -> (data seed, seed) -> its ``results.json``; raises when one is missing."""
    results: dict[str, dict[Key, dict]] = {}
    for n in names:
        files = {k: root / "runs" / run_id(n, *k) / "results.json" for k in keys}
        missing = [str(f) for f in files.values() if not f.is_file()]
        if missing:
            raise PipelineError(
                f"{root}: missing run results {missing[:3]}; run `hrrbert doctor2vec compare` again"
            )
        results[n] = {k: json.loads(f.read_text(encoding="utf-8")) for k, f in files.items()}
    return results


def _introduction(
    spec: dict[str, Any],
    sets: dict,
    seeds: list[int],
    manifest: dict[str, Any],
    results: dict[str, dict[Key, dict]],
) -> list[str]:
    """The title and the paragraphs on the data, the training, the runs and the metrics."""
    first_run = next(iter(results[spec["runs"][0]].values()))
    n = len(sets) * len(seeds)
    if None in sets:
        data_line = f"Data `{sets[None]}` (one data set, given)"
        varies = "the initialization and batch order (training seed)"
    else:
        data_line = (
            f"Data generated with seeds {list(sets)} (each draws its own doctors, panels, trials and "
            f"enrollment): " + ", ".join(f"`{p}`" for p in sets.values()) + f"; data seed {next(iter(sets))}"
        )
        varies = "the data set (data seed) and the initialization and batch order (training seed)"
    return [
        "# Doctor2Vec on HRR code embeddings: matching doctors to clinical trials (issue 9)",
        "",
        f"{data_line} (program `{manifest['program_id']}`, dataset `{manifest.get('source_dataset_id')}`): "
        f"{_counts_line(manifest.get('counts', {}))}. Each doctor's memory holds up to "
        f"{first_run['config']['max_memories']} of their patients; a trial (conditions, "
        "exclusions, age band, sex, category, text) reads each patient's codes, then the memory. "
        f"{_criteria_line(manifest)} Every code that makes a patient eligible for a rare-disease trial is "
        "removed from every patient history during training, so those codes are first seen at test time.",
        "",
        f"Training: {spec['epochs']} epochs, D = {spec['dim']}, validation every 10 steps, the best "
        f"validation PR-AUC kept. Each configuration runs on {len(sets)} data set(s) x training seeds "
        f"{seeds} = {n} run(s); what varies between runs: {varies}. Cells: mean over the runs with a 95 % "
        f"t-interval over runs ({'no interval: one run' if n < 2 else f'{n - 1} degree(s) of freedom'}); "
        "the references are deterministic given the data, so their interval is over the data sets only. "
        "Metrics: PR-AUC / ROC-AUC pooled over the split's doctor-trial pairs; P@k and AP/trial rank the "
        "doctors of each trial (mean over trials with an enrolling doctor). `params` counts the trained "
        "parameters; `wall s` is one training.",
    ]


def _result_tables(results: dict[str, dict[Key, dict]], refs: dict[Any, dict[str, dict]]) -> list[str]:
    """One table per split (test, test_rare): every configuration and reference, mean and t-interval."""
    parts: list[str] = []
    for split, title in SPLIT_TITLES.items():
        rows = []
        for n, rs in results.items():
            if all(split in r for r in rs.values()):
                r0 = next(iter(rs.values()))
                cfg = r0["config"]
                codes = cfg["embedding"] + (f" {cfg['hrr_mode']}" if cfg["embedding"] == "hrr" else "")
                rows.append(
                    [
                        n,
                        codes,
                        cfg["doctor"],
                        cfg["patient_encoder"],
                        f"{r0['parameters']:,}",
                        len(rs),
                        *[t_interval(r[split][k] for r in rs.values()) for k in METRICS],
                        f"{np.mean([r['wall_s'] for r in rs.values()]):.0f}",
                    ]
                )
        names = list(dict.fromkeys(name for ref in refs.values() for name in ref.get(split, {})))
        for name in names:
            per_set = [ref[split][name] for ref in refs.values() if name in ref.get(split, {})]
            rows.append(
                [
                    name,
                    "-",
                    "-",
                    "-",
                    "0",
                    len(per_set),
                    *[_reference_cell([m[k] for m in per_set]) for k in METRICS],
                    "-",
                ]
            )
        if rows:
            sizes = _split_sizes(results, refs, split)
            parts += [
                "",
                f"## {title}",
                "",
                sizes,
                "",
                table(
                    [
                        "run",
                        "codes",
                        "doctor",
                        "patients",
                        "params",
                        "runs",
                        *[NAMES[k] for k in METRICS],
                        "wall s",
                    ],
                    rows,
                ),
            ]
    return parts


def _reference_cell(values: list[float]) -> Any:
    """A reference's value (one data set) or its mean and t-interval over the data sets."""
    return values[0] if len(values) == 1 else t_interval(values)


def _split_sizes(results: dict[str, dict[Key, dict]], refs: dict[Any, dict[str, dict]], split: str) -> str:
    """Trials, pairs and enrolling pairs of ``split`` in each data set."""
    by_set = {}
    for rs in results.values():
        for (d, _), r in rs.items():
            if split in r:
                by_set.setdefault(d, r[split])
    for d, ref in refs.items():
        if split in ref and d not in by_set:
            by_set[d] = next(iter(ref[split].values()))
    return (
        "; ".join(
            ("" if d is None else f"data seed {d}: ")
            + f"{m['trials']} trials, {m['pairs']:,} pairs, {m['positives']:,} enrolling"
            for d, m in by_set.items()
        )
        + "."
    )


def _per_run(results: dict[str, dict[Key, dict]], keys: list[Key]) -> list[str]:
    """AP/trial and ROC-AUC of every run, per split (the values behind the intervals)."""
    header = ["run", "split", "metric", *[f"s{s}" if d is None else f"d{d}/s{s}" for d, s in keys]]
    rows = [
        [n, split, NAMES[k], *[rs[key][split][k] if key in rs and split in rs[key] else None for key in keys]]
        for n, rs in results.items()
        for split in SPLIT_TITLES
        for k in PER_RUN_METRICS
        if any(split in r for r in rs.values())
    ]
    return ["", "## Per run (d: data seed, s: training seed)", "", table(header, rows)]


def _contrasts(results: dict[str, dict[Key, dict]]) -> list[str]:
    """The :data:`CONTRASTS` run by run: mean difference (t-interval over runs), a better in k of n runs;
    then the differences that hold in every run."""
    rows, claims = [], []
    for a, b, what in CONTRASTS:
        if a not in results or b not in results:
            continue
        for split in SPLIT_TITLES:
            for k in CONTRAST_METRICS:
                w = wins(
                    {key: r[split][k] for key, r in results[a].items() if split in r},
                    {key: r[split][k] for key, r in results[b].items() if split in r},
                )
                if not w.n:
                    continue
                rows.append([what, split, NAMES[k], t_interval(w.diffs), f"a better in {w.cell()}"])
                if (c := claim(f"`{a}`", f"`{b}`", f"{split} {NAMES[k]}", w)) is not None:
                    claims.append(f"- {c}")
    if not rows:
        return []
    return [
        "",
        "## Differences, run by run (a - b)",
        "",
        "Each run of a against the run of b on the same data set and training seed; the interval is the "
        "t-interval of those per-run differences (it covers training noise and, with several data seeds, "
        "the draw of doctors and trials).",
        "",
        table(["contrast", "split", "metric", "mean diff", "runs"], rows),
        "",
        *(["Holds in every run:", "", *claims] if claims else ["No difference holds in every run."]),
    ]


def _hrr_sharing(shared: dict[str, float], data_seed: int | None) -> list[str]:
    """The paragraph on condition codes sharing their HRR ``base`` vector (:func:`shared_hrr_codes`)."""
    where = "" if data_seed is None else f" (data seed {data_seed})"
    return [
        "",
        "How HRR `base` differs from a plain table here: every code whose program edges equal another "
        "code's gets the same `base` vector (codes mapped to one SNOMED concept: an ICD-9 code and its "
        "ICD-10 equivalent, codes that differ only in an encounter character). Of the listed condition "
        f"codes{where}, "
        + ", ".join(f"{100 * v:.0f} % ({k})" for k, v in shared.items())
        + " share their `base` vector with a code the trial does not list. With criteria on standard "
        "concepts those codes are eligible too, which `base` knows from the ontology while a plain table "
        "has to learn it (and cannot for codes unseen in training); with exact-code criteria "
        "(`generate --criteria listed`) the same sharing keeps `base` from telling eligible codes from "
        "ineligible ones. `add` and `cat` give every code a free part as well.",
    ]


def _rare_trial_explanation(
    root: Path, results: dict[str, dict[Key, dict]], sets: dict, program: str, device: str
) -> list[str]:
    """Which patients made a doctor fit a rare-disease trial, for the first run of the first HRR (else plain)
    dynamic configuration."""
    from .evaluate import evaluate_doctor2vec

    show = next((n for n in ("hrr-base-dynamic", "hrr-add-dynamic", "plain-dynamic") if n in results), None)
    if not show:
        return []
    d, s = next(iter(results[show]))
    _, text = evaluate_doctor2vec(
        root / "runs" / run_id(show, d, s), sets[d], program, split="test_rare", device=device
    )
    where = f"seed {s}" if d is None else f"data seed {d}, seed {s}"
    return [
        "",
        f"## Which patients made a doctor fit a rare-disease trial ({show}, {where})",
        "",
        "```",
        text,
        "```",
    ]


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
        return (
            f"Trials list up to {o.get('listed_max')} codes of a condition's ICD category; a patient is "
            f"eligible with any of up to {o.get('max_family')} codes of that category{also}, so the rule "
            "below misses the unlisted ones."
        )
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
    """:func:`write_report` as a :class:`pipelines.eval.report.Report` (its headline: the two result
    tables)."""
    path = write_report(root)
    tables = [b for b in path.read_text(encoding="utf-8").split("\n\n") if b.startswith("| run")]
    return Report(path, "\n\n".join(tables[:2]))


def report_any(runs_dir: str | Path) -> list[Report]:
    """Reports of experiments and Doctor2Vec comparisons in ``runs_dir`` (``hrrbert report``)."""
    return report(runs_dir, kinds={EXPERIMENT_FILE: write_experiment_report, COMPARE_FILE: comparison_report})
