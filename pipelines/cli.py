"""``hrrbert``: the user-facing command group (thin click layer; imports happen inside commands)."""

from __future__ import annotations

import sys

import click

from pipelines.data.tasks import TASKS
from pipelines.demo.defaults import DEMO_PATIENTS


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
def main() -> None:
    """hrrbert: ontology-structured (HRR) embeddings for transformers over ICD codes."""


@main.command("sql")
@click.argument("program", type=click.Path(exists=True, file_okay=False))
@click.argument("query")
@click.option("--format", "fmt", type=click.Choice(["table", "csv", "json"]), default="table")
@click.option("--max-rows", type=int, default=50, show_default=True, help="Rows printed in table format.")
def sql_cmd(program: str, query: str, fmt: str, max_rows: int) -> None:
    """Run read-only DuckDB SQL over a compiled PROGRAM folder.

    Views: atoms, relations, concepts, edges, slices, snomed_concepts, snomed_relationships,
    snomed_descriptions, icd_map (and the other graph/ tables).
    """
    from ontology_compiler import OntologyCompilerError
    from ontology_compiler.sql import format_result, run_sql

    try:
        result = run_sql(program, query)
    except OntologyCompilerError as e:
        raise click.ClickException(str(e)) from e
    click.echo(format_result(result, fmt=fmt, max_rows=max_rows))


@main.command("demo")
@click.option("--out", type=click.Path(file_okay=False), default="artifacts", show_default=True)
@click.option("--size", type=click.Choice(["small", "default"]), default="default", show_default=True)
@click.option("--patients", type=int, default=DEMO_PATIENTS, show_default=True, help="Synthetic cohort size.")
@click.option("--train-steps", type=int, default=None,
              help="Pretraining steps per model (default: the demo's; 0: data steps only, no experiment).")  # fmt: skip
@click.option("--trials", type=int, default=None, help="Fine-tuning trials per task (default: the demo's).")
@click.option("--device", default="cpu", show_default=True, help="cpu, cuda or auto.")
@click.option(
    "--threads", type=int, default=1, show_default=True, help="torch CPU threads (0: torch's default)."
)
def demo_cmd(**kw) -> None:
    """Build the demo data, then pretrain, fine-tune, evaluate and report the smallest experiment."""
    import logging

    from pipelines.demo.run import run_demo

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s", datefmt="%H:%M:%S")
    sys.exit(run_demo(kw.pop("out"), **kw))


@main.command("prepare")
@click.option("--mimic", type=click.Path(exists=True, file_okay=False), help="MIMIC-IV root (holding hosp/).")
@click.option(
    "--eicu", type=click.Path(exists=True, file_okay=False), help="eICU-CRD folder (patient.csv.gz, ...)."
)
@click.option("--meds", type=click.Path(exists=True, file_okay=False), help="MEDS root (data/, metadata/).")
@click.option(
    "--demo", is_flag=True, help="Build the demo release, compile it, generate the synthetic cohort."
)
@click.option("--program", type=click.Path(exists=True, file_okay=False), help="Compiled program folder.")
@click.option("--out", type=click.Path(file_okay=False), default="artifacts/datasets", show_default=True)
@click.option("--name", default=None, help="Dataset name (default: <source kind>-<input folder name>).")
@click.option(
    "--max-len", type=int, default=128, show_default=True, help="Tokens per sequence, [CLS] included."
)
@click.option(
    "--max-visits", type=int, default=100, show_default=True, help="Visits (segments) per sequence."
)
@click.option("--unknown", type=click.Choice(["drop", "unk"]), default="drop", show_default=True,
              help="Codes not in the program: drop them (counted) or map them to [UNK].")  # fmt: skip
@click.option("--rood-codes", type=int, default=32, show_default=True, help="Held-out (ROOD) codes; 0: none.")
@click.option(
    "--finetune-train", type=int, default=None, help="Fine-tuning train size (default: scaled 13k/190k)."
)
@click.option(
    "--finetune-val", type=int, default=None, help="Fine-tuning validation size (default: scaled 2k/190k)."
)
@click.option("--test", "test_size", type=int, default=None, help="Test size (default: min(666, 5 %)).")
@click.option("--disease-train", type=int, default=None, help="Disease-task subset of fine-tuning train.")
@click.option("--disease-val", type=int, default=None, help="Disease-task subset of fine-tuning validation.")
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("--demo-size", type=click.Choice(["default", "small"]), default="default", show_default=True)
@click.option("--demo-patients", type=int, default=DEMO_PATIENTS, show_default=True)
@click.option("--artifacts", type=click.Path(file_okay=False), default="artifacts", show_default=True,
              help="Where --demo writes releases/, programs/ and ehr/.")  # fmt: skip
@click.option("-v", "--verbose", is_flag=True, help="Log progress.")
def prepare_cmd(**kw: object) -> None:
    """Read EHR diagnoses, tokenize them against a program and write a tokenized dataset."""
    import logging

    from ontology_compiler import OntologyCompilerError
    from pipelines.data.prepare import prepare
    from pipelines.data.splits import SplitOptions
    from pipelines.errors import PipelineError

    logging.basicConfig(level=logging.INFO if kw.pop("verbose") else logging.WARNING, format="%(message)s")
    split_keys = ("rood_codes", "finetune_train", "finetune_val", "disease_train", "disease_val")
    splits = SplitOptions(test=kw.pop("test_size"), seed=kw["seed"], **{k: kw.pop(k) for k in split_keys})
    demo = {k: kw.pop(k) for k in ("demo", "demo_size", "demo_patients", "artifacts")}
    try:
        if demo["demo"]:
            from pipelines.demo.prepare import prepare_demo

            if kw["mimic"] or kw["eicu"] or kw["meds"] or kw["program"]:
                raise PipelineError(
                    "--demo builds its own release, program and cohort; drop --mimic/--eicu/--meds/--program"
                )
            results = prepare_demo(
                artifacts=demo["artifacts"], out=kw["out"], size=demo["demo_size"],
                n_patients=demo["demo_patients"], seed=kw["seed"], splits=splits, max_len=kw["max_len"],
                max_visits=kw["max_visits"], unknown=kw["unknown"],
            )  # fmt: skip
        else:
            results = prepare(splits=splits, **kw)
    except (PipelineError, OntologyCompilerError) as e:
        raise click.ClickException(str(e)) from e
    for r in results:
        c = r.manifest["counts"]
        p, codes = c["patients"], c["codes"]
        click.echo(
            f"dataset   {r.path}{'' if r.written else ' (already prepared)'}\n"
            f"patients  {p['kept']} kept of {p['in_source']}; dropped {p['dropped']}\n"
            f"splits    {', '.join(f'{k} {v}' for k, v in p['by_split'].items())}\n"
            f"codes     {codes['tokens']} tokens, {codes['concepts_seen_in_pretraining']} of "
            f"{codes['program_concepts']} concepts seen in pretraining, log frequency "
            f"{codes['log_frequency_min']:.2f} to {codes['log_frequency_max']:.2f}\n"
            f"unknown   {codes['unknown_code_rows']} code rows ({100 * codes['unknown_code_share']:.2f} %), "
            f"{codes['unknown_codes_distinct']} distinct codes not in the program"
        )


def _log_level(verbose: bool, quiet: bool) -> None:
    import logging

    level = logging.DEBUG if verbose else logging.WARNING if quiet else logging.INFO
    logging.basicConfig(level=level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")


def _train_errors() -> tuple[type[Exception], ...]:
    from hrr_kernel import HRRKernelError
    from model import ModelError
    from pipelines.errors import PipelineError

    return (PipelineError, ModelError, HRRKernelError)


@main.command("pretrain")
@click.argument("dataset", type=click.Path(exists=True, file_okay=False))
@click.option(
    "--program",
    required=True,
    type=click.Path(exists=True, file_okay=False),
    help="Program the dataset was tokenized against.",
)
@click.option("--out", type=click.Path(file_okay=False), default="artifacts/runs", show_default=True)
@click.option("--run-id", default=None, help="Run folder name (default: pretrain-<mode>-<model>-seed<seed>).")
@click.option("--resume", is_flag=True, help="Continue the run from its newest checkpoint (same config).")
@click.option(
    "--model", type=click.Choice(["tiny", "small", "bert-base"]), default="small", show_default=True
)
@click.option(
    "--mode",
    type=click.Choice(["unstructured", "base", "freq", "add", "cat"]),
    default="base",
    show_default=True,
)
@click.option("--normalize", is_flag=True, help="Unit-norm HRR concept vectors.")
@click.option("--epochs", type=int, default=100, show_default=True)
@click.option("--max-steps", type=int, default=None, help="Total steps (overrides --epochs).")
@click.option("--batch-size", type=int, default=96, show_default=True, help="Global batch, split over ranks.")
@click.option("--lr", type=float, default=1e-4, show_default=True)
@click.option("--warmup", type=float, default=0.1, show_default=True, help="Warm-up fraction of the steps.")
@click.option("--weight-decay", type=float, default=0.0, show_default=True)
@click.option("--clip", type=float, default=1.0, show_default=True, help="Max gradient norm (0: off).")
@click.option("--mask-prob", type=float, default=0.15, show_default=True)
@click.option("--dropout", type=float, default=0.1, show_default=True)
@click.option(
    "--topk", type=int, multiple=True, default=(10, 100), show_default=True, help="Validation top-k."
)
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("--bf16", is_flag=True, help="bf16 autocast (CUDA only).")
@click.option(
    "--val-every", type=int, default=0, show_default=True, help="Steps between validations (0: per epoch)."
)
@click.option("--max-val", type=int, default=None, help="Validate on at most this many patients.")
@click.option("--save-every", type=int, default=500, show_default=True, help="Steps between checkpoints.")
@click.option("--log-every", type=int, default=10, show_default=True)
@click.option("--device", default="auto", show_default=True, help="auto, cpu, cuda.")
@click.option("--tensorboard", is_flag=True, help="Also write TensorBoard scalars (if installed).")
@click.option("--no-progress", is_flag=True, help="No progress bar.")
@click.option("-v", "--verbose", is_flag=True)
@click.option("-q", "--quiet", is_flag=True)
def pretrain_cmd(
    dataset: str,
    out: str,
    run_id: str | None,
    resume: bool,
    verbose: bool,
    quiet: bool,
    no_progress: bool,
    **kw,
) -> None:
    """Pretrain HRRBERT (masked-code modelling) on a tokenized DATASET; runs under torchrun too."""
    _log_level(verbose, quiet)
    from pipelines.train.pretrain import pretrain

    try:
        r = pretrain(dataset, out=out, run_id=run_id, resume=resume, progress=not no_progress, **kw)
    except _train_errors() as e:
        raise click.ClickException(str(e)) from e
    if int(__import__("os").environ.get("RANK", "0")) == 0:
        val = ", ".join(f"{k} {v:.4f}" for k, v in r.validation.items() if isinstance(v, float))
        click.echo(f"run       {r.run_dir}\nsteps     {r.step}\nvalidation {val}")


@main.command("finetune")
@click.argument("pretrained", type=click.Path(exists=True, file_okay=False))
@click.option("--dataset", required=True, type=click.Path(exists=True, file_okay=False))
@click.option("--program", required=True, type=click.Path(exists=True, file_okay=False))
@click.option("--task", type=click.Choice(TASKS), default="mortality", show_default=True)
@click.option("--model", type=click.Choice(["bert", "visit-transformer"]), default="bert", show_default=True,
              help="bert: the pretrained BERT; visit-transformer: a visit-level Transformer whose code "
              "embedding starts from the pretrained BERT's.")  # fmt: skip
@click.option("--out", type=click.Path(file_okay=False), default="artifacts/runs", show_default=True)
@click.option(
    "--run-id", default=None, help="Run folder name (default: finetune-<task>-<pretrained>-seed<seed>)."
)
@click.option("--trials", type=int, default=1, show_default=True, help="Repeats with seeds seed, seed+1, ...")
@click.option("--epochs", type=int, default=10, show_default=True)
@click.option("--batch-size", type=int, default=80, show_default=True)
@click.option("--lr", type=float, default=2e-5, show_default=True, help="Constant learning rate.")
@click.option("--weight-decay", type=float, default=4e-6, show_default=True)
@click.option("--clip", type=float, default=1.0, show_default=True)
@click.option("--seed", type=int, default=0, show_default=True)
@click.option(
    "--select-by",
    type=click.Choice(["f1", "auroc", "auprc", "accuracy", "loss"]),
    default="f1",
    show_default=True,
)
@click.option("--threshold", type=float, default=0.5, show_default=True)
@click.option("--device", default="auto", show_default=True)
@click.option("--bf16", is_flag=True)
@click.option("--no-progress", is_flag=True)
@click.option("-v", "--verbose", is_flag=True)
@click.option("-q", "--quiet", is_flag=True)
def finetune_cmd(
    pretrained: str, out: str, run_id: str | None, verbose: bool, quiet: bool, no_progress: bool, **kw
) -> None:
    """Fine-tune a PRETRAINED run (or model folder) on mortality or ICD-10 chapters."""
    _log_level(verbose, quiet)
    from pipelines.train.finetune import finetune

    try:
        r = finetune(pretrained, out=out, run_id=run_id, progress=not no_progress, **kw)
    except _train_errors() as e:
        raise click.ClickException(str(e)) from e
    click.echo(f"run       {r.run_dir}")
    for t in r.trials:
        m = t["test"] or t["val"]
        which = "test" if t["test"] else "val"
        vals = ", ".join(
            f"{k} {m[k]:.4f}"
            for k in ("accuracy", "precision", "recall", "f1", "auroc", "auprc")
            if isinstance(m.get(k), float)
        )
        click.echo(f"trial {t['trial']}   {which}: {vals} (best epoch {t['best_epoch']})")


@main.command("evaluate")
@click.argument("pretrained", type=click.Path(exists=True, file_okay=False))
@click.option("--dataset", required=True, type=click.Path(exists=True, file_okay=False),
              help="Dataset the model was pretrained on.")  # fmt: skip
@click.option("--program", required=True, type=click.Path(exists=True, file_okay=False))
@click.option(
    "--out", required=True, type=click.Path(file_okay=False), help="Folder for evaluation.json, tsne.png."
)
@click.option("--mortality", type=click.Path(exists=True, file_okay=False), help="Mortality fine-tuning run.")
@click.option(
    "--chapters", type=click.Path(exists=True, file_okay=False), help="Chapters fine-tuning run (ROOD)."
)
@click.option("--transfer-dataset", type=click.Path(exists=True, file_okay=False),
              help="Dataset of another layout (eICU) for the mortality transfer test.")  # fmt: skip
@click.option("--per-bin", type=int, default=400, show_default=True, help="Codes probed per frequency bin.")
@click.option("--neighbours", type=int, default=4, show_default=True, help="Top-k neighbours scored.")
@click.option(
    "--per-group", type=int, default=10, show_default=True, help="Common/rare/random codes studied."
)
@click.option(
    "--tsne-points", type=int, default=2000, show_default=True, help="Codes in the t-SNE plot (0: none)."
)
@click.option(
    "--cost-steps", type=int, default=3, show_default=True, help="Timed steps for the cost figures."
)
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("--device", default="auto", show_default=True)
@click.option("-v", "--verbose", is_flag=True)
@click.option("-q", "--quiet", is_flag=True)
def evaluate_cmd(verbose: bool, quiet: bool, **kw) -> None:
    """Evaluate a PRETRAINED run: frequency bins, neighbours, t-SNE, ROOD, transfer, cost."""
    _log_level(verbose, quiet)
    from pipelines.eval.pretrained import evaluate, summary_lines

    try:
        r = evaluate(**kw)
    except _train_errors() as e:
        raise click.ClickException(str(e)) from e
    click.echo("\n".join(summary_lines(r)))


@main.command("report")
@click.argument("runs_dir", type=click.Path(exists=True, file_okay=False))
def report_cmd(runs_dir: str) -> None:
    """Write report.md for the experiment in RUNS_DIR (or each experiment under it)."""
    from pipelines.doctor2vec.compare import report_any
    from pipelines.errors import PipelineError

    try:
        reps = report_any(runs_dir)
    except PipelineError as e:
        raise click.ClickException(str(e)) from e
    for r in reps:
        click.echo(f"report    {r.path}\n\n{r.headline}\n")


@main.command("experiment")
@click.option("--dataset", required=True, type=click.Path(exists=True, file_okay=False))
@click.option("--program", required=True, type=click.Path(exists=True, file_okay=False))
@click.option(
    "--transfer-dataset", type=click.Path(exists=True, file_okay=False), help="eICU-layout dataset."
)
@click.option("--name", default="experiment", show_default=True, help="Experiment folder name.")
@click.option("--out", type=click.Path(file_okay=False), default="artifacts/runs", show_default=True)
@click.option("--config", "configurations", multiple=True, default=("unstructured", "base"), show_default=True,
              type=click.Choice(["unstructured", "base", "freq", "add", "cat"]), help="Embedding modes (repeat).")  # fmt: skip
@click.option(
    "--model", type=click.Choice(["tiny", "small", "bert-base"]), default="bert-base", show_default=True
)
@click.option(
    "--seeds", "pretrain_seeds", type=int, default=3, show_default=True, help="Pretraining runs per config."
)
@click.option("--trials", type=int, default=10, show_default=True, help="Fine-tunings per run and task.")
@click.option("--epochs", type=int, default=100, show_default=True, help="Pretraining epochs.")
@click.option("--max-steps", type=int, default=None, help="Pretraining steps (overrides --epochs).")
@click.option("--batch-size", type=int, default=96, show_default=True, help="Pretraining batch.")
@click.option("--lr", type=float, default=1e-4, show_default=True, help="Pretraining peak learning rate.")
@click.option("--finetune-epochs", type=int, default=10, show_default=True)
@click.option("--finetune-lr", type=float, default=2e-5, show_default=True)
@click.option("--finetune-batch-size", type=int, default=80, show_default=True)
@click.option("--bf16", is_flag=True, help="bf16 autocast (CUDA only).")
@click.option("--per-bin", type=int, default=400, show_default=True)
@click.option("--tsne-points", type=int, default=2000, show_default=True)
@click.option("--device", default="auto", show_default=True)
@click.option("--no-progress", is_flag=True)
@click.option("-v", "--verbose", is_flag=True)
@click.option("-q", "--quiet", is_flag=True)
def experiment_cmd(verbose: bool, quiet: bool, no_progress: bool, **kw) -> None:
    """The paper's protocol: configurations x seeds x trials, then evaluation and the report."""
    _log_level(verbose, quiet)
    from pipelines.eval.experiment import options_to_config, run_experiment

    try:
        r = run_experiment(options_to_config(progress=not no_progress, **kw))
    except _train_errors() as e:
        raise click.ClickException(str(e)) from e
    click.echo(f"report    {r.report}\nwall time {r.seconds:.0f} s\n\n{r.headline}")


@main.group("qa")
def qa_group() -> None:
    """Clinical question answering with memory networks over a patient's diagnoses."""


@qa_group.command("generate")
@click.argument("dataset", type=click.Path(exists=True, file_okay=False))
@click.option("--program", required=True, type=click.Path(exists=True, file_okay=False))
@click.option("--out", type=click.Path(file_okay=False), default="artifacts/qa", show_default=True)
@click.option("--name", default=None, help="QA set name (default: qa-<dataset name>).")
@click.option("--max-memories", type=int, default=30, show_default=True)
@click.option("--train-patients", type=int, default=2000, show_default=True)
@click.option("--val-patients", type=int, default=300, show_default=True)
@click.option("--test-patients", type=int, default=800, show_default=True)
@click.option("--unseen-fraction", type=float, default=0.15, show_default=True)
@click.option("--seed", type=int, default=0, show_default=True)
def qa_generate_cmd(dataset: str, program: str, out: str, name: str | None, **kw) -> None:
    """Generate a clinical QA set from a tokenized DATASET and its program."""
    from pipelines.errors import PipelineError
    from pipelines.qa.data import QAOptions, generate_qa

    try:
        r = generate_qa(dataset, program, out=out, name=name, options=QAOptions(**kw))
    except (PipelineError, ValueError) as e:
        raise click.ClickException(str(e)) from e
    q = r.manifest["counts"]["questions"]
    click.echo(f"qa        {r.path}{'' if r.written else ' (already generated)'}")
    click.echo("questions " + ", ".join(f"{k} {v}" for k, v in q.items()))


@qa_group.command("train")
@click.argument("qa", type=click.Path(exists=True, file_okay=False))
@click.option("--program", required=True, type=click.Path(exists=True, file_okay=False))
@click.option("--out", type=click.Path(file_okay=False), default="artifacts/runs", show_default=True)
@click.option("--run-id", default=None)
@click.option("--model", type=click.Choice(["memn2n", "memnn"]), default="memn2n", show_default=True)
@click.option("--embedding", type=click.Choice(["plain", "hrr"]), default="plain", show_default=True)
@click.option("--hrr-mode", default="base", show_default=True)
@click.option("--dim", type=int, default=32, show_default=True)
@click.option("--hops", type=int, default=3, show_default=True)
@click.option(
    "--tying", type=click.Choice(["adjacent", "layerwise", "none"]), default="adjacent", show_default=True
)
@click.option("--encoding", type=click.Choice(["bow", "position"]), default="position", show_default=True)
@click.option("--no-temporal", is_flag=True, help="No temporal encoding.")
@click.option("--epochs", type=int, default=8, show_default=True)
@click.option("--batch-size", type=int, default=64, show_default=True)
@click.option("--lr", type=float, default=0.01, show_default=True)
@click.option(
    "--max-train", type=int, default=0, show_default=True, help="At most this many train questions."
)
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("--device", default="cpu", show_default=True)
@click.option("--no-progress", is_flag=True)
@click.option("-v", "--verbose", is_flag=True)
@click.option("-q", "--quiet", is_flag=True)
def qa_train_cmd(qa: str, out: str, run_id: str | None, no_temporal: bool, no_progress: bool,
                 verbose: bool, quiet: bool, **kw) -> None:  # fmt: skip
    """Train a memory network on a QA set; report test accuracy overall, per type, on unseen codes."""
    _log_level(verbose, quiet)
    from pipelines.qa.train import train_qa

    try:
        r = train_qa(qa, out=out, run_id=run_id, temporal=not no_temporal, progress=not no_progress, **kw)
    except (*_train_errors(), ValueError) as e:
        raise click.ClickException(str(e)) from e
    click.echo(f"run       {r.run_dir}\nparams    {r.results['parameters']:,}")
    click.echo(_qa_summary(r.results["test"] or r.results["val"]))


def _qa_summary(m: dict) -> str:
    lines = [
        f"accuracy  {m['accuracy']:.4f} overall, {m['accuracy_unseen']:.4f} unseen codes ({m['n_unseen']})"
    ]
    lines += [f"  {t:<16} {a:.4f}" for t, a in m["by_type"].items()]
    if m.get("skipped"):
        lines.append("skipped   " + ", ".join(f"{k} {v}" for k, v in m["skipped"].items()))
    return "\n".join(lines)


@qa_group.command("evaluate")
@click.argument("run", type=click.Path(exists=True, file_okay=False))
@click.option("--qa", required=True, type=click.Path(exists=True, file_okay=False))
@click.option("--program", required=True, type=click.Path(exists=True, file_okay=False))
@click.option("--split", type=click.Choice(["train", "val", "test"]), default="test", show_default=True)
@click.option("--patient", type=int, default=None, help="Subject id whose attention is printed.")
@click.option("--threshold", type=float, default=0.05, show_default=True, help="Smallest weight printed.")
def qa_evaluate_cmd(
    run: str, qa: str, program: str, split: str, patient: int | None, threshold: float
) -> None:
    """Evaluate a trained QA RUN (or model folder); print accuracy and one patient's attention per hop."""
    from pipelines.qa.train import evaluate_qa

    try:
        report, text = evaluate_qa(run, qa, program, split=split, patient=patient, threshold=threshold)
    except (*_train_errors(), ValueError) as e:
        raise click.ClickException(str(e)) from e
    click.echo(_qa_summary(report))
    click.echo("")
    click.echo(text)


@qa_group.command("compare")
@click.option("--dataset", required=True, type=click.Path(exists=True, file_okay=False))
@click.option("--program", required=True, type=click.Path(exists=True, file_okay=False))
@click.option(
    "--out", type=click.Path(file_okay=False), default="artifacts/runs/qa-compare", show_default=True
)
@click.option("--epochs", type=int, default=4, show_default=True)
@click.option("--max-train", type=int, default=3000, show_default=True)
@click.option("--finetune-epochs", type=int, default=3, show_default=True)
@click.option("--pretrain-steps", type=int, default=60, show_default=True)
@click.option("--skip-finetune", is_flag=True, help="Only the memory-network tables.")
@click.option("--threads", type=int, default=1, show_default=True, help="torch threads (0: leave as is).")
def qa_compare_cmd(**kw) -> None:
    """Run the comparison grid on a dataset and write report.md (memory networks, visit Transformer vs BERT)."""
    _log_level(False, True)
    from pipelines.qa.compare import compare

    try:
        path = compare(**kw)
    except (*_train_errors(), ValueError) as e:
        raise click.ClickException(str(e)) from e
    click.echo(path.read_text(encoding="utf-8"))
    click.echo(f"report    {path}")


@main.group("doctor2vec")
def doctor2vec_group() -> None:
    """Doctor2Vec: match doctors to clinical trials through a memory of their patients."""


@doctor2vec_group.command("generate")
@click.argument("dataset", type=click.Path(exists=True, file_okay=False))
@click.option("--program", required=True, type=click.Path(exists=True, file_okay=False))
@click.option("--out", type=click.Path(file_okay=False), default="artifacts/doctor2vec", show_default=True)
@click.option("--name", default=None, help="Data set name (default: d2v-<dataset name>).")
@click.option("--doctors", type=int, default=300, show_default=True)
@click.option("--train-trials", type=int, default=120, show_default=True)
@click.option("--val-trials", type=int, default=30, show_default=True)
@click.option("--test-trials", type=int, default=30, show_default=True)
@click.option("--rare-trials", type=int, default=30, show_default=True)
@click.option("--criteria", type=click.Choice(["category", "listed"]), default="category", show_default=True,
              help="Eligible with any code of a listed condition's ICD category, or with a listed code only.")  # fmt: skip
@click.option("--seed", type=int, default=0, show_default=True)
def d2v_generate_cmd(dataset: str, program: str, out: str, name: str | None, **kw) -> None:
    """Generate doctors, patient panels, trials and enrollment outcomes from a tokenized DATASET."""
    from pipelines.doctor2vec.data import D2VOptions, generate_doctor2vec
    from pipelines.errors import PipelineError

    try:
        r = generate_doctor2vec(dataset, program, out=out, name=name, options=D2VOptions(**kw))
    except (PipelineError, ValueError) as e:
        raise click.ClickException(str(e)) from e
    c = r.manifest.get("counts", {})
    click.echo(f"data      {r.path}{'' if r.written else ' (already generated)'}")
    click.echo(f"doctors   {c.get('doctors', 0):,} ({c.get('patients', 0):,} patients in panels)")
    click.echo("trials    " + ", ".join(f"{k} {v}" for k, v in c.get("trials", {}).items()))
    click.echo(
        "positives " + ", ".join(f"{k} {100 * v:.1f} %" for k, v in c.get("positive_rate", {}).items())
    )
    skipped = {k: v for k, v in c.get("skipped", {}).items() if v}
    if skipped:
        click.echo("skipped   " + ", ".join(f"{k.replace('_', ' ')} {v}" for k, v in skipped.items()))


@doctor2vec_group.command("train")
@click.argument("data", type=click.Path(exists=True, file_okay=False))
@click.option("--program", required=True, type=click.Path(exists=True, file_okay=False))
@click.option("--out", type=click.Path(file_okay=False), default="artifacts/runs", show_default=True)
@click.option("--run-id", default=None)
@click.option("--embedding", type=click.Choice(["plain", "hrr"]), default="hrr", show_default=True)
@click.option(
    "--hrr-mode", default="base", show_default=True, help="HRREmbedding mode (with --embedding hrr)."
)
@click.option("--doctor", type=click.Choice(["dynamic", "static"]), default="dynamic", show_default=True)
@click.option("--patient-encoder", type=click.Choice(["pooled", "visit-transformer"]), default="pooled",
              show_default=True)  # fmt: skip
@click.option("--dim", type=int, default=64, show_default=True)
@click.option("--hops", type=int, default=1, show_default=True)
@click.option("--max-memories", type=int, default=64, show_default=True, help="Patients per doctor memory.")
@click.option("--epochs", type=int, default=3, show_default=True)
@click.option("--doctors-per-batch", type=int, default=8, show_default=True)
@click.option("--lr", type=float, default=1e-3, show_default=True)
@click.option("--val-every", type=int, default=10, show_default=True, help="Steps between validations.")
@click.option("--show-held-out", is_flag=True, help="Keep the rare trials' codes in training histories.")
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("--device", default="cpu", show_default=True)
@click.option("--no-progress", is_flag=True)
@click.option("-v", "--verbose", is_flag=True)
@click.option("-q", "--quiet", is_flag=True)
def d2v_train_cmd(data: str, out: str, run_id: str | None, show_held_out: bool, no_progress: bool,
                  verbose: bool, quiet: bool, **kw) -> None:  # fmt: skip
    """Train Doctor2Vec on DATA's train trials; report test and rare-disease-trial metrics."""
    _log_level(verbose, quiet)
    from pipelines.doctor2vec.train import train_doctor2vec

    try:
        r = train_doctor2vec(data, out=out, run_id=run_id, hide_held_out=not show_held_out,
                             progress=not no_progress, **kw)  # fmt: skip
    except (*_train_errors(), ValueError) as e:
        raise click.ClickException(str(e)) from e
    click.echo(f"run       {r.run_dir}\nparams    {r.results['parameters']:,}")
    for split in ("val", "test", "test_rare"):
        if split in r.results:
            click.echo(_d2v_summary(split, r.results[split]))


def _d2v_summary(split: str, m: dict) -> str:
    def f(x) -> str:
        return "n/a" if x is None or x != x else f"{x:.4f}"

    return (
        f"{split:<10} PR-AUC {f(m['pr_auc'])}  ROC-AUC {f(m['roc_auc'])}  P@5 {f(m['p_at_5'])}  "
        f"P@10 {f(m['p_at_10'])}  ({m['trials']} trials, {m['pairs']} pairs, {m['positives']} enrolling)"
    )


@doctor2vec_group.command("evaluate")
@click.argument("run", type=click.Path(exists=True, file_okay=False))
@click.option("--data", required=True, type=click.Path(exists=True, file_okay=False))
@click.option("--program", required=True, type=click.Path(exists=True, file_okay=False))
@click.option("--split", type=click.Choice(["train", "val", "test", "test_rare"]), default="test_rare",
              show_default=True)  # fmt: skip
@click.option("--trial", type=int, default=None, help="Trial id whose top doctors and attention are printed.")
@click.option("--top-doctors", type=int, default=3, show_default=True)
@click.option("--top-patients", type=int, default=5, show_default=True)
def d2v_evaluate_cmd(run: str, data: str, program: str, split: str, trial: int | None, top_doctors: int,
                     top_patients: int) -> None:  # fmt: skip
    """Evaluate a trained RUN on a split; print one trial's best doctors and the patients they were chosen for."""
    from pipelines.doctor2vec.evaluate import evaluate_doctor2vec

    try:
        report, text = evaluate_doctor2vec(run, data, program, split=split, trial=trial,
                                           top_doctors=top_doctors, top_patients=top_patients)  # fmt: skip
    except (*_train_errors(), ValueError) as e:
        raise click.ClickException(str(e)) from e
    click.echo(_d2v_summary(split, report))
    click.echo("")
    click.echo(text)


@doctor2vec_group.command("compare")
@click.option("--dataset", required=True, type=click.Path(exists=True, file_okay=False))
@click.option("--program", required=True, type=click.Path(exists=True, file_okay=False))
@click.option("--data", type=click.Path(exists=True, file_okay=False),
              help="An existing Doctor2Vec data folder (default: generated from --dataset).")  # fmt: skip
@click.option(
    "--out", type=click.Path(file_okay=False), default="artifacts/runs/doctor2vec-compare", show_default=True
)
@click.option("--epochs", type=int, default=3, show_default=True)
@click.option("--dim", type=int, default=64, show_default=True)
@click.option("--seeds", type=int, default=1, show_default=True, help="Trainings per configuration.")
@click.option("--visit-transformer", is_flag=True, help="Also the visit-Transformer patient encoder.")
@click.option("--threads", type=int, default=1, show_default=True, help="torch threads (0: leave as is).")
def d2v_compare_cmd(**kw) -> None:
    """Plain vs HRR codes x dynamic vs static doctor, on test and rare-disease trials; writes report.md."""
    _log_level(False, True)
    from pipelines.doctor2vec.compare import compare

    try:
        path = compare(**kw)
    except (*_train_errors(), ValueError) as e:
        raise click.ClickException(str(e)) from e
    click.echo(path.read_text(encoding="utf-8"))
    click.echo(f"report    {path}")


@main.command("export-owl")
@click.argument("program", type=click.Path(exists=True, file_okay=False))
@click.argument("out", type=click.Path(dir_okay=False))
@click.option("--force", is_flag=True, help="Overwrite OUT when it exists.")
@click.option("--scope", type=click.Choice(["program", "all"]), default="program", show_default=True,
              help="program: concepts the program uses and their ancestors; all: every graph concept.")  # fmt: skip
@click.option(
    "--base-iri", default=None, help="Ontology IRI (default https://hrrbert.invalid/program/<id>/)."
)
def export_owl_cmd(program: str, out: str, force: bool, scope: str, base_iri: str | None) -> None:
    """Write a compiled PROGRAM as an OWL ontology (RDF/XML) to OUT, e.g. for Protégé."""
    from ontology_compiler import OntologyCompilerError
    from ontology_compiler.owl_export import export_owl
    from ontology_compiler.sql import resolve_program

    try:
        r = export_owl(resolve_program(program), out, force=force, scope=scope, base_iri=base_iri)
    except OntologyCompilerError as e:
        raise click.ClickException(str(e)) from e
    c = r.counts
    click.echo(
        f"classes   {c.get('ontology_classes', 0):,} ontology classes, {c.get('tokens', 0):,} tokens\n"
        f"axioms    is-a {c.get('is_a', 0):,}, restrictions {c.get('restrictions', 0):,} "
        f"({c.get('role_groups', 0):,} role groups), mappedTo {c.get('mapped_to', 0):,}\n"
        f"owl       {r.path}"
    )
