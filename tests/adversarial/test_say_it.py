"""Silent or misleading cases that now say what happened (issue 35, "Say it"): each gives a warning, a clear
error (exit 1, 2 for usage, no traceback) or valid output.

Before, each with exit code 0 unless said:
1. a MEDS ``time`` with a time zone was converted without a word, to the *machine's* zone (DuckDB's default:
   ``TZ=Asia/Tokyo`` moved 23:30 UTC to 08:30 the next day); a time of year 11476 or DuckDB's ``infinity``
   was read as a visit time;
2. all-false labels gave ``auroc nan, auprc nan`` in the fine-tuning summary, without a warning;
3. RF2 rows with an effectiveTime after the package date (the date in the file name) were used silently;
4. ``--release snapshot --as-of D`` compiled the Full files, ignoring ``--release snapshot``;
5. ESC, CSI/OSC sequences and other C0/C1 controls in RF2 terms reached the terminal raw (``explain``, the
   ``sql`` table, the compile summary, log lines, error messages); ``sql --format json`` kept C1 controls raw;
6. all-NaN weights: ``hrrbert explain`` printed ``+nan`` scores;
7. a model folder without ``program/``: ``explain`` said "pass the program it was trained with", but had no
   option to take one.
"""

from __future__ import annotations

import importlib.util
import json
import logging
import os
import shutil
import subprocess
import sys
from datetime import datetime as dt
from pathlib import Path

import click
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch
from cli_exit import clean_exit as _clean_exit
from click.testing import CliRunner
from ehr_fixtures import assert_refused, mini_program, prepare_cli, write_meds_shards
from rf2_edit import FIXTURE, INT, one, read_lines, write_lines
from safetensors.torch import load_file, save_file

from hrr_kernel import load_program
from model import HRRBert, PretrainedFileError, bert_tiny
from ontology_compiler import OptionError, compile_ontology
from ontology_compiler.cli import main as compile_main
from ontology_compiler.logs import setup_logging
from ontology_compiler.printable import printable, printable_json
from pipelines.cli import main
from pipelines.cli.options import handle_errors
from pipelines.cli.summaries import finetune_summary
from pipelines.data.readers.meds import read_meds
from pipelines.errors import InputFileError, PipelineError
from pipelines.train.metrics import binary_metrics, undefined_metrics

ROOT = Path(__file__).resolve().parents[2]
E119 = "DIAGNOSIS//ICD//10//E119"
ESC_TERM = "\x1b[31mDiabetes\x1b[0m mellitus\x1b]0;pwned\x07\x9b2J"  # colour, OSC title + BEL, 8-bit CSI
ESC_SHOWN = "\\x1b[31mDiabetes\\x1b[0m mellitus\\x1b]0;pwned\\x07\\x9b2J"


@pytest.fixture(scope="module")
def program(tmp_path_factory):
    return mini_program(tmp_path_factory.mktemp("programs"))


def _tiny_model(program: Path, out: Path) -> Path:
    torch.manual_seed(0)
    HRRBert(bert_tiny(dim=16, n_layers=1, n_heads=2, ffn_dim=32), load_program(program)).save_pretrained(out)
    return out


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory, program):
    return _tiny_model(program, tmp_path_factory.mktemp("model") / "model")


# --- 1: MEDS times with a time zone, times out of range ----------------------------------------------------


def _zoned_shard(subject: int, zone: str) -> pa.Table:
    """Two diagnoses of ``subject`` at 2116-01-01 23:30 UTC, the column in time zone ``zone``."""
    utc = pa.array([dt(2116, 1, 1, 23, 30)] * 2, pa.timestamp("us")).cast(pa.int64())
    return pa.table(
        {
            "subject_id": pa.array([subject] * 2, pa.int64()),
            "time": utc.cast(pa.timestamp("us", tz=zone)),
            "code": [E119, "ICD10CM/I10"],
        }
    )


def test_meds_times_with_a_time_zone_are_read_as_utc_and_warned_once(tmp_path, caplog):
    root = write_meds_shards(
        tmp_path / "meds",
        {
            "train/0.parquet": _zoned_shard(1, "America/New_York"),
            "train/1.parquet": _zoned_shard(2, "+05:30"),
        },
    )
    with caplog.at_level(logging.WARNING):
        r = read_meds(root)
    zoned = [m for m in caplog.messages if "time zone" in m]
    assert len(zoned) == 1, caplog.messages  # once per dataset, not once per shard
    msg = zoned[0]
    assert "2 shard(s)" in msg and "converted to UTC" in msg
    assert "train/0.parquet (America/New_York)" in msg and "train/1.parquet (+05:30)" in msg
    assert r.counts["shards_with_time_zone"] == 2
    assert set(r.events["visit_time"].to_pylist()) == {dt(2116, 1, 1, 23, 30)}  # the UTC wall-clock time


def test_meds_time_zone_reading_does_not_depend_on_the_machine_zone(tmp_path):
    root = write_meds_shards(tmp_path / "meds", {"0.parquet": _zoned_shard(1, "America/New_York")})
    code = (
        "from pipelines.data.readers.meds import read_meds; import sys; "
        "print(read_meds(sys.argv[1]).events['visit_time'][0])"
    )
    env = {**os.environ, "TZ": "Asia/Tokyo"}
    out = subprocess.run(
        [sys.executable, "-c", code, str(root)], env=env, cwd=ROOT, capture_output=True, text=True, check=True
    )
    assert out.stdout.strip() == "2116-01-01 23:30:00", out.stdout  # not 2116-01-02 08:30 (Tokyo)


def test_meds_time_zone_warning_through_prepare(program, tmp_path):
    root = write_meds_shards(tmp_path / "meds", {"0.parquet": _zoned_shard(1, "Europe/Paris")})
    res = prepare_cli("--meds", root, out=tmp_path / "out", program=program)
    assert res.exit_code == 0, res.output
    assert res.output.count("time zone") == 1 and "0.parquet (Europe/Paris)" in res.output


@pytest.mark.parametrize(
    ("micros", "shown"),
    [
        (300_000_000_000_000_000, "11476-08-15"),  # after the year 9999
        (2**63 - 1, "infinity"),
        (-(2**63) + 1, "-infinity"),
        (-9_000_000_000_000_000_000, "(BC)"),
    ],
)
def test_meds_time_out_of_range_names_shard_and_row(program, tmp_path, micros, shown):
    ok = pa.array([dt(2116, 1, 1)], pa.timestamp("us")).cast(pa.int64())[0].as_py()
    shard = pa.table(
        {
            "subject_id": pa.array([1, 1], pa.int64()),
            "time": pa.array([ok, micros], pa.int64()).cast(pa.timestamp("us")),
            "code": [E119, "MEDS_DEATH"],
        }
    )
    root = write_meds_shards(tmp_path / "meds", {"train/0.parquet": shard})
    with pytest.raises(InputFileError) as e:
        read_meds(root)
    msg = str(e.value)
    assert "train/0.parquet" in msg and "at file_row_number 1 is out of range" in msg and shown in msg
    assert "expected: a time from 0001-01-01 to 9999-12-31" in msg
    out = tmp_path / "out"
    assert_refused(prepare_cli("--meds", root, out=out, program=program), out, "file_row_number 1", "range")


# --- 2: labels of one class: AUROC undefined ---------------------------------------------------------------


def test_undefined_metrics_says_why():
    assert undefined_metrics([0, 1, 0]) is None
    assert (
        undefined_metrics(np.zeros(4))
        == "AUROC and AUPRC are undefined: all 4 labels are negative (one class)"
    )
    assert undefined_metrics(np.ones((3, 1))) == "AUROC is undefined: all 3 labels are positive (one class)"
    assert "each of the 2 labels has one class only" in undefined_metrics(np.array([[0, 1], [0, 1]]))
    assert undefined_metrics(np.array([[0, 1], [1, 1]])) is None  # defined on the first label
    assert undefined_metrics(np.zeros(0)) == "AUROC and AUPRC are undefined: no rows"


def test_finetune_summary_prints_an_undefined_metric_as_n_a(tmp_path):
    m = binary_metrics(np.zeros(5), np.linspace(0, 1, 5))
    assert np.isnan(m["auroc"]) and np.isnan(m["auprc"])
    result = type(
        "R", (), {"run_dir": tmp_path, "trials": [{"trial": 0, "test": m, "val": {}, "best_epoch": 0}]}
    )
    text = finetune_summary(result)
    assert "auroc n/a, auprc n/a" in text and "nan" not in text


_spec = importlib.util.spec_from_file_location(
    "meds_io_helpers", ROOT / "tests" / "pipelines" / "data" / "test_meds_io.py"
)
M = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(M)


@pytest.fixture(scope="module")
def label_setup(tmp_path_factory):
    """A MEDS cohort prepared against the fixture program, a 2-step pretraining, and label folders whose
    labels are all false and all true."""
    from train_fixtures import compile_fixture

    from pipelines.data.prepare import prepare
    from pipelines.train.pretrain import pretrain

    base = tmp_path_factory.mktemp("labels")
    prog = compile_fixture(base / "programs")
    root, times = M.write_cohort(base / "cohort")
    (ds,) = prepare(meds=root, program=prog, out=base / "ds", splits=M.SPLITS)
    kw = dict(out=base / "runs", model="tiny", mode="base", max_steps=2, batch_size=8, device="cpu")
    pre = pretrain(ds.path, prog, **kw, progress=False).run_dir
    labels = {
        v: M.write_labels(base / f"all_{v}", [(s, ts[1], v) for s, ts in times.items()])
        for v in (False, True)
    }
    return {"program": prog, "dataset": ds.path, "pretrained": pre, "labels": labels, "base": base}


@pytest.fixture(scope="module")
def all_false_run(label_setup) -> Path:
    """A fine-tuning run on the all-false labels."""
    from pipelines.train.finetune import finetune

    s = label_setup
    kw = dict(out=s["base"] / "ft", max_steps=2, batch_size=8, device="cpu", progress=False)
    return finetune(s["pretrained"], s["dataset"], s["program"], labels=str(s["labels"][False]), **kw).run_dir


def _strict_json(path: Path):
    def refuse(name):
        raise AssertionError(f"{path}: {name} is not JSON")

    return json.loads(path.read_text(), parse_constant=refuse)


@pytest.mark.parametrize(
    ("value", "note"), [(False, "all 10 labels are negative"), (True, "all 10 labels are positive")]
)
def test_finetune_on_one_class_labels_warns_and_writes_null(label_setup, tmp_path, value, note, one_thread):
    s = label_setup
    args = ["finetune", str(s["pretrained"]), "--dataset", str(s["dataset"]), "--program", str(s["program"])]
    args += ["--labels", str(s["labels"][value]), "--max-steps", "2", "--batch-size", "8", "--device", "cpu"]
    res = CliRunner().invoke(main, [*args, "--no-progress", "--select-by", "auroc", "--out", str(tmp_path)])
    assert res.exit_code == 0, res.output
    out = res.output
    assert "split 'test': AUROC" in out and note in out and "shown as n/a (null in the JSON files)" in out
    assert "split 'finetune_val'" in out and "--select-by auroc cannot rank the validations" in out
    (summary,) = [line for line in out.splitlines() if line.startswith("trial 0   test:")]
    assert "auroc n/a" in summary and "nan" not in summary
    (results,) = tmp_path.glob("*/trial-0/results.json")
    test = _strict_json(results)["test"]
    assert test["auroc"] is None and test["n"] == 10
    for line in (results.parent / "metrics.jsonl").read_text().splitlines():
        json.loads(line, parse_constant=lambda c: pytest.fail(f"metrics.jsonl holds {c}"))
    _strict_json(results.parent.parent / "summary.json")


def test_evaluate_on_one_class_labels_warns_and_writes_null(label_setup, all_false_run, tmp_path, one_thread):
    s, run = label_setup, all_false_run
    args = ["evaluate", str(s["pretrained"]), "--dataset", str(s["dataset"]), "--program", str(s["program"])]
    args += ["--labels", str(s["labels"][False]), "--labels-run", str(run), "--out", str(tmp_path)]
    args += ["--device", "cpu", "--tsne-points", "0", "--cost-steps", "0", "--unbinding-rows", "0"]
    res = CliRunner().invoke(main, args)
    assert res.exit_code == 0, res.output
    assert "labels all_False, split 'test' (10 rows): AUROC and AUPRC are undefined" in res.output
    assert "AUROC n/a" in res.output
    lab = _strict_json(tmp_path / "evaluation.json")["labels"]
    assert lab["mean"]["auroc"] is None and lab["intervals"]["auroc"]["estimate"] is None


# --- 3: effectiveTimes after the package date ---------------------------------------------------------------


def test_effective_time_after_the_package_date_is_warned_and_a_finding(release, tmp_path, caplog):
    p = one(release / INT, "sct2_Concept_Snapshot_INT_*.txt")
    rows = read_lines(p)
    assert rows[2].split(b"\t")[1] == b"20200131"
    rows[2] = rows[2].replace(b"\t20200131\t", b"\t20230115\t", 1)  # after the package's 20220531
    write_lines(p, rows)
    with caplog.at_level(logging.WARNING):
        r = compile_ontology(release, out=tmp_path / "p")
    msg = f"{p}, line 3: effectiveTime 20230115 is after the package date 20220531 (1 row(s) of the file are)"
    assert any(msg in m and "used as they are" in m for m in caplog.messages), caplog.messages
    assert r.manifest["counts"]["rows_effective_after_package_date"] == 1
    assert any(msg in f for f in r.manifest["findings"]), r.manifest["findings"]
    res = CliRunner().invoke(compile_main, [str(release), "--out", str(tmp_path / "p2")])
    assert res.exit_code == 0 and "line 3: effectiveTime 20230115 is after the package date" in res.output
    assert "warnings  1 rows with an effectiveTime after their package's date (used as they are" in res.output


def test_the_clean_fixture_has_no_effective_time_after_its_package_date(baseline):
    assert baseline.manifest["counts"]["rows_effective_after_package_date"] == 0


# --- 4: --release snapshot --as-of D ------------------------------------------------------------------------


def test_release_snapshot_with_as_of_is_refused(tmp_path):
    with pytest.raises(OptionError, match=r"--release snapshot and --as-of 20220131 exclude each other"):
        compile_ontology(FIXTURE, out=tmp_path / "p", release="snapshot", as_of="20220131")
    res = CliRunner().invoke(
        compile_main,
        [str(FIXTURE), "--release", "snapshot", "--as-of", "20220131", "--out", str(tmp_path / "q")],
    )
    _clean_exit(res, 1, "--release snapshot and --as-of 20220131 exclude each other", "--release full")
    assert not (tmp_path / "q").exists() or not any((tmp_path / "q").rglob("manifest.json"))


def test_as_of_with_full_or_auto_still_reads_full(tmp_path):
    full = compile_ontology(FIXTURE, out=tmp_path / "p", release="full", as_of="20220131")
    auto = compile_ontology(FIXTURE, out=tmp_path / "p", as_of="20220131")
    assert full.manifest["release"]["type"] == auto.manifest["release"]["type"] == "Full"
    assert full.program_id == auto.program_id


# --- 5: terminal escape sequences in data text --------------------------------------------------------------


def test_printable_escapes_what_a_terminal_acts_on():
    assert printable("\x1b[2J\x1b]0;title\x07") == "\\x1b[2J\\x1b]0;title\\x07"
    assert printable("a\rb\x00c\x7fd\x9be\x85") == "a\\x0db\\x00c\\x7fd\\x9be\\x85"
    assert printable("evil\u202eexe.txt\u2066x\u2069") == "evil\\u202eexe.txt\\u2066x\\u2069"
    kept = "line 1\n\tDiabète – Type 2 … 糖尿病 Ω"
    assert printable(kept) == kept
    assert printable(12) == "12"
    shown = printable_json(json.dumps({"t": ESC_TERM}, ensure_ascii=False))
    assert json.loads(shown) == {"t": ESC_TERM} and "\x9b" not in shown and "\x1b" not in shown


@pytest.fixture(scope="module")
def hostile(tmp_path_factory):
    """A copy of the fixture release whose synonym "Diabetes mellitus" (a concept label) holds ESC
    sequences, its program and a tiny model of it."""
    base = tmp_path_factory.mktemp("hostile")
    release = base / "release"
    shutil.copytree(FIXTURE, release)
    for pattern in ("sct2_Description_Snapshot-en_INT_*.txt", "sct2_Description_Full-en_INT_*.txt"):
        p = one(release, pattern)
        write_lines(
            p, [r.replace(b"\tDiabetes mellitus\t", f"\t{ESC_TERM}\t".encode()) for r in read_lines(p)]
        )
    prog = compile_ontology(release, out=base / "programs").path
    return {"program": prog, "model": _tiny_model(prog, base / "model")}


def _strings(obj) -> set[str]:
    """Every string value inside a JSON value."""
    if isinstance(obj, dict):
        return set().union(*map(_strings, obj.values())) if obj else set()
    if isinstance(obj, list):
        return set().union(*map(_strings, obj)) if obj else set()
    return {obj} if isinstance(obj, str) else set()


def _raw_free(text: str) -> None:
    assert "\x1b" not in text and "\x9b" not in text and "\x07" not in text, repr(text)


def test_explain_prints_a_hostile_label_escaped(hostile):
    res = CliRunner().invoke(main, ["explain", str(hostile["model"]), "E119"])
    assert res.exit_code == 0, res.output
    _raw_free(res.output)
    assert ESC_SHOWN in res.output
    res = CliRunner().invoke(main, ["explain", str(hostile["model"]), "E119", "--json", "-q"])
    assert res.exit_code == 0, res.output
    _raw_free(res.output)
    assert ESC_TERM in _strings(json.loads(res.output))  # the same value


def test_sql_table_and_json_escape_a_hostile_term(hostile):
    q = "SELECT term FROM snomed_descriptions WHERE concept_id = 9990103007 ORDER BY term"
    res = CliRunner().invoke(main, ["sql", str(hostile["program"]), q])
    assert res.exit_code == 0, res.output
    _raw_free(res.output)
    assert ESC_SHOWN in res.output
    res = CliRunner().invoke(main, ["sql", str(hostile["program"]), q, "--format", "json"])
    assert res.exit_code == 0, res.output
    _raw_free(res.output)
    assert ESC_TERM in [json.loads(x)["term"] for x in res.output.splitlines()]  # the same value
    stored = pq.read_table(hostile["program"] / "graph" / "snomed_descriptions.parquet")
    assert ESC_TERM in stored["term"].to_pylist()  # the data is not changed


def test_compile_summary_escapes_data_text(tmp_path):
    codes = tmp_path / "codes.txt"
    codes.write_text("MINI:0000012\nMINI:\x1b[2J0009999\n", encoding="utf-8")
    owl = ROOT / "tests" / "data" / "owl_mini.owl"
    res = CliRunner().invoke(compile_main, [str(owl), "--codes", str(codes), "--out", str(tmp_path / "p")])
    assert res.exit_code == 0, res.output
    _raw_free(res.output)
    assert "MINI:\\x1b[2J0009999" in res.output


def test_log_lines_and_errors_escape_data_text(capsys):
    setup_logging()
    logging.getLogger("pipelines.test").warning("a term: %s", ESC_TERM)
    err = capsys.readouterr().err
    _raw_free(err)
    assert ESC_SHOWN in err

    @click.command()
    @handle_errors
    def cmd():
        raise PipelineError(f"no such code {ESC_TERM}")

    res = CliRunner().invoke(cmd, [])
    _clean_exit(res, 1, f"no such code {ESC_SHOWN}")
    _raw_free(res.output)


# --- 6: weights that are NaN --------------------------------------------------------------------------------


def _poisoned(model_dir: Path, dst: Path, tensor: str | None = None) -> Path:
    shutil.copytree(model_dir, dst)
    w = dst / "model.safetensors"
    state = load_file(str(w))
    for k, v in state.items():
        if tensor is None or k == tensor:
            state[k] = torch.full_like(v, float("nan"))
    save_file(state, str(w), metadata={"format": "pt"})
    return dst


def test_all_nan_weights_are_refused_naming_folder_and_tensor(model_dir, tmp_path):
    d = _poisoned(model_dir, tmp_path / "nan")
    res = CliRunner().invoke(main, ["explain", str(d), "E119"])
    out = _clean_exit(res, 1, str(d / "model.safetensors"), "tensor embeddings.norm.bias", "NaN or infinite")
    assert "+nan" not in out


def test_one_non_finite_tensor_is_named(model_dir, tmp_path):
    d = _poisoned(model_dir, tmp_path / "nan", tensor="layers.0.ffn_in.weight")
    with pytest.raises(
        PretrainedFileError, match=r"tensor layers\.0\.ffn_in\.weight holds 512 of 512 values"
    ):
        HRRBert.from_pretrained(d)
    res = CliRunner().invoke(main, ["query", str(d), "--like", "E119"])
    _clean_exit(res, 1, "layers.0.ffn_in.weight", "NaN or infinite")


# --- 7: a model folder without its program ------------------------------------------------------------------


def test_explain_and_query_take_the_program_the_message_asks_for(model_dir, program, tmp_path):
    d = tmp_path / "bare"
    shutil.copytree(model_dir, d)
    shutil.rmtree(d / "program")
    res = CliRunner().invoke(main, ["explain", str(d), "E119"])
    _clean_exit(res, 1, str(d / "program"), "does not carry its program", "--program PROGRAM")
    res = CliRunner().invoke(main, ["explain", str(d), "E119", "--program", str(program)])
    assert res.exit_code == 0 and "Type 2 diabetes mellitus" in res.output, res.output
    res = CliRunner().invoke(main, ["query", str(d), "--like", "E119", "--program", str(program)])
    assert res.exit_code == 0, res.output
    other = compile_ontology(FIXTURE, out=tmp_path / "other", as_of="20220131").path
    res = CliRunner().invoke(main, ["explain", str(d), "E119", "--program", str(other)])
    _clean_exit(res, 1, "trained against program", other.name)
    for command in ("explain", "query", "mlm-cache"):
        res = CliRunner().invoke(main, [command, "--help"])
        assert "--program" in res.output, (command, res.output)
