"""Nothing lost, nothing replaced: cases that ended with exit 0 having dropped or replaced data.

1. A MEDS ``data/train`` that is a symbolic link to a folder of shards was skipped (1 of 3 patients kept);
   shard walks now follow linked folders (each real folder once) and say what they read.
2. Two ``export-meds`` / ``diff`` runs into one ``--out`` both said "wrote" and the last replaced the first;
   the publication is now one rename that refuses a target that appeared meanwhile, and ``--force`` moves
   the old output aside and deletes it only after the new one is in.
3. Killed runs left ``.tmp-*`` / ``.old-*`` folders forever; the next run into the same parent removes a
   dead writer's temporary folder and puts back an earlier output it had moved aside.
4. Two ``pretrain --resume`` of one run trained side by side (steps twice in ``metrics.jsonl``); a run folder
   is now locked by the process that trains it, and a second one is refused naming its pid.
5. A checkpoint with ``step: -7`` resumed from step -7; its fields are now checked, naming file and field.
6. ``carry`` to a program sharing no code exited 0 having carried only the special tokens; now refused (a
   small overlap is warned with the counts).
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import signal
import subprocess
import sys
from datetime import datetime as dt
from pathlib import Path

import pyarrow.parquet as pq
import pytest
import torch
from carry_fixtures import SPECIALS, _write, write_new_program, write_old_program
from cli_exit import clean_exit as _clean_exit
from click.testing import CliRunner
from ehr_fixtures import meds_shard, mini_program, prepare_cli, write_meds_shards, written_datasets
from rf2_edit import FIXTURE
from torch import nn
from train_fixtures import dataset_dir, program_dir  # noqa: F401

from ontology_compiler import compile_ontology
from ontology_compiler.api import clean_leftovers
from pipelines.cli import main
from pipelines.data.folders import folder_written
from pipelines.errors import InputFileError, PipelineError
from pipelines.train.checkpoint import CheckpointError, checkpoint_path, list_checkpoints
from pipelines.train.loop import LoopOptions, StepOutput, open_run, run_loop
from pipelines.train.run_lock import LOCK_FILE, RunInUseError, lock_scope

ROOT = Path(__file__).resolve().parents[2]


def _hidden(parent: Path) -> list[str]:
    return sorted(p.name for p in parent.iterdir() if p.name.startswith((".tmp-", ".old-")))


def _dead_pid() -> int:
    """The pid of a process that has ended (a writer killed earlier)."""
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait()
    return p.pid


@pytest.fixture(scope="module")
def program(tmp_path_factory):
    return mini_program(tmp_path_factory.mktemp("programs"))


# --- 1: shard walks follow symbolic links to folders ----------------------------------------------------


def _three_split_meds(tmp_path: Path) -> Path:
    """A MEDS root whose ``data/train`` is a link to a shard folder elsewhere; tuning and held_out real."""
    elsewhere = write_meds_shards(
        tmp_path / "scratch", {"0.parquet": meds_shard([(1, dt(2110, 1, 9), "DIAGNOSIS//ICD//10//E119")])}
    )
    root = write_meds_shards(
        tmp_path / "meds",
        {
            "tuning/0.parquet": meds_shard([(2, dt(2111, 2, 1), "DIAGNOSIS//ICD//10//I10")]),
            "held_out/0.parquet": meds_shard([(3, dt(2112, 3, 1), "DIAGNOSIS//ICD//10//J45909")]),
        },
    )
    (root / "data" / "train").symlink_to(elsewhere / "data", target_is_directory=True)
    return root


def test_a_linked_shard_folder_is_read_and_said(tmp_path, caplog):
    from pipelines.data.readers.meds import meds_files, read_meds

    root = _three_split_meds(tmp_path)
    with caplog.at_level(logging.INFO, logger="pipelines.data.readers.meds"):
        r = read_meds(root)
    assert sorted(set(r.events["subject_id"].to_pylist())) == [1, 2, 3]  # was [2, 3]
    said = [m for m in caplog.messages if "reading 3 shards" in m]
    assert said, caplog.messages
    assert f"train 1 (a link to {(tmp_path / 'scratch' / 'data').resolve()})" in said[0]
    assert "held_out 1" in said[0] and "tuning 1" in said[0]
    assert root / "data" / "train" / "0.parquet" in meds_files(root)  # an input of the dataset id


def test_a_linked_shard_folder_through_prepare(program, tmp_path):
    root = _three_split_meds(tmp_path)
    out = tmp_path / "out"
    res = prepare_cli("--meds", root, out=out, program=program)
    assert res.exit_code == 0, res.output
    (ds,) = written_datasets(out)
    assert pq.read_table(ds / "patients.parquet").num_rows == 3


def test_a_link_loop_is_read_once_and_warned(tmp_path, caplog):
    from pipelines.data.readers.meds import read_meds

    root = _three_split_meds(tmp_path)
    (root / "data" / "tuning" / "again").symlink_to(root / "data", target_is_directory=True)  # a loop
    with caplog.at_level(logging.WARNING):
        r = read_meds(root)
    assert r.events.num_rows == 3  # each shard once
    assert any("a folder already read; skipped" in m for m in caplog.messages), caplog.messages


def test_a_link_to_nothing_is_an_error_naming_it(program, tmp_path):
    root = _three_split_meds(tmp_path)
    (root / "data" / "extra").symlink_to(tmp_path / "gone", target_is_directory=True)
    out = tmp_path / "out"
    _clean_exit(
        prepare_cli("--meds", root, out=out, program=program),
        1,
        str(root / "data" / "extra"),
        "which does not exist",
    )
    assert written_datasets(out) == []


def test_a_linked_label_folder_is_read(tmp_path):
    import pyarrow as pa

    from pipelines.data.label_tasks import read_label_task

    real = tmp_path / "real"
    real.mkdir()
    pq.write_table(
        pa.table(
            {
                "subject_id": pa.array([1, 2], pa.int64()),
                "prediction_time": pa.array([dt(2110, 1, 9), dt(2111, 1, 1)], pa.timestamp("us")),
                "boolean_value": [True, False],
            }
        ),
        real / "part.parquet",
    )
    task = tmp_path / "mortality"
    task.mkdir()
    (task / "shard0").symlink_to(real, target_is_directory=True)
    t = read_label_task(task)
    assert [i["path"] for i in t.inputs] == ["shard0/part.parquet"]


def test_an_rf2_release_reached_through_a_link_compiles_the_same(tmp_path):
    release = tmp_path / "release"
    shutil.copytree(FIXTURE, release)
    package = next(p for p in release.iterdir() if "International" in p.name)
    shutil.move(package / "Snapshot", tmp_path / "snapshot")
    (package / "Snapshot").symlink_to(tmp_path / "snapshot", target_is_directory=True)
    linked = compile_ontology(release, out=tmp_path / "p1", name="mini")
    plain = compile_ontology(FIXTURE, out=tmp_path / "p2", name="mini")
    assert linked.program_id == plain.program_id


# --- 2: one atomic publish ------------------------------------------------------------------------------


def _competitor_appears(monkeypatch, out: Path, record: str) -> None:
    """Another run into ``out`` finishes while this one writes: its folder appears after the checks."""
    import pipelines.data.folders as folders

    real = folders.temp_beside

    def temp_beside(target):
        tmp = real(target)
        if target == out:
            (out / Path(record).parent).mkdir(parents=True, exist_ok=True)
            (out / record).write_text(json.dumps({"etl_name": "hrrbert export-meds", "by": "the other run"}))
        return tmp

    monkeypatch.setattr(folders, "temp_beside", temp_beside)


def test_export_meds_refuses_an_out_that_appeared_meanwhile(tmp_path, monkeypatch):
    src = _three_split_meds(tmp_path)
    out = tmp_path / "exports" / "meds"
    _competitor_appears(monkeypatch, out, "metadata/dataset.json")
    res = CliRunner().invoke(main, ["export-meds", str(out), "--meds", str(src)])
    _clean_exit(res, 1, str(out), "appeared while this MEDS export was being written", "not replaced")
    assert "wrote" not in res.output
    assert json.loads((out / "metadata" / "dataset.json").read_text())["by"] == "the other run"  # kept
    assert _hidden(out.parent) == []  # the temporary folder removed


def test_diff_refuses_an_out_that_appeared_meanwhile(tmp_path, monkeypatch):
    old = write_old_program(tmp_path / "old")
    new = write_new_program(tmp_path / "new")
    out = tmp_path / "diffs" / "d"
    _competitor_appears(monkeypatch, out, "diff.json")
    res = CliRunner().invoke(main, ["diff", str(old), str(new), "--out", str(out)])
    _clean_exit(res, 1, str(out), "appeared while this diff was being written")
    assert json.loads((out / "diff.json").read_text())["by"] == "the other run"
    assert _hidden(out.parent) == []


def test_force_moves_the_old_output_aside_and_deletes_it_only_after(tmp_path, monkeypatch):
    out = tmp_path / "out"
    out.mkdir()
    (out / "record.json").write_text("old")
    seen = []
    real_rename = Path.rename

    def rename(self, target):
        seen.append((self.name[:5], Path(target).name[:5], [h[:5] for h in _hidden(tmp_path)]))
        return real_rename(self, target)

    monkeypatch.setattr(Path, "rename", rename)
    with folder_written(out, "result", force=True, record="record.json") as tmp:
        (tmp / "record.json").write_text("new")
    # the old one moved aside first, then the new one renamed in (the old one still there); removed last
    assert seen == [("out", ".old-", [".tmp-"]), (".tmp-", "out", [".old-", ".tmp-"])]
    assert (out / "record.json").read_text() == "new" and _hidden(tmp_path) == []


def test_an_interrupt_between_the_renames_puts_the_old_output_back(tmp_path, monkeypatch):
    out = tmp_path / "out"
    out.mkdir()
    (out / "record.json").write_text("old")
    real_rename = Path.rename

    def rename(self, target):
        if self.name.startswith(".tmp-"):
            raise KeyboardInterrupt
        return real_rename(self, target)

    monkeypatch.setattr(Path, "rename", rename)
    with (
        pytest.raises(KeyboardInterrupt),
        folder_written(out, "result", force=True, record="record.json") as t,
    ):
        (t / "record.json").write_text("new")
    assert (out / "record.json").read_text() == "old" and _hidden(tmp_path) == []


def test_force_never_replaces_a_foreign_folder_that_appeared(tmp_path, monkeypatch):
    out = tmp_path / "out"
    import pipelines.data.folders as folders

    real = folders.temp_beside

    def temp_beside(target):
        tmp = real(target)
        out.mkdir()
        (out / "mine.txt").write_text("keep me")
        return tmp

    monkeypatch.setattr(folders, "temp_beside", temp_beside)
    with (
        pytest.raises(PipelineError, match="holds no record.json"),
        folder_written(out, "result", force=True, record="record.json") as tmp,
    ):
        (tmp / "record.json").write_text("new")
    assert (out / "mine.txt").read_text() == "keep me" and _hidden(tmp_path) == []


def test_export_owl_refuses_a_file_that_appeared_meanwhile(program, tmp_path, monkeypatch):
    import ontology_compiler.owl_export as owl_export
    from ontology_compiler.errors import OutputExistsError

    pytest.importorskip("owlready2")
    out = tmp_path / "program.owl"
    real = owl_export.publish_file

    def publish_file(tmp, target, *, replace):
        Path(target).write_text("the other run's")
        return real(tmp, target, replace=replace)

    monkeypatch.setattr(owl_export, "publish_file", publish_file)
    with pytest.raises(OutputExistsError, match="appeared while it was being written"):
        owl_export.export_owl(program, out)
    assert out.read_text() == "the other run's" and _hidden(tmp_path) == []


# --- 3: what killed runs left ---------------------------------------------------------------------------


def test_leftovers_of_a_dead_writer_are_cleaned_or_put_back(tmp_path, caplog):
    dead = _dead_pid()
    parent = tmp_path / "exports"
    parent.mkdir()
    for name in (f".tmp-a-{dead}-0123abcd", f".old-b-{dead}-0123abcd", f".old-c-{dead}-89abcdef"):
        (parent / name).mkdir()
        (parent / name / "f").write_text(name)
    (parent / "b").mkdir()  # b was published after its old copy was moved aside: the old one goes
    (parent / f".tmp-d-{os.getppid()}-0123abcd").mkdir()  # a live writer's: left alone
    (parent / ".tmp-weird").mkdir()  # not named as ours (another tool's, an older writer's): reported, left
    (parent / f".tmp-legacy-{dead}").mkdir()
    with caplog.at_level(logging.INFO):
        done = clean_leftovers(parent)
    assert _hidden(parent) == [f".tmp-d-{os.getppid()}-0123abcd", f".tmp-legacy-{dead}", ".tmp-weird"]
    assert (parent / "c" / "f").read_text() == f".old-c-{dead}-89abcdef"  # the only copy: put back
    assert len(done) == 5 and any("restored" in d and f"pid {dead}" in d for d in done)
    assert any("not named as this project's writers name theirs" in m for m in caplog.messages)


def test_the_next_export_meds_cleans_a_killed_force_run(tmp_path):
    """A --force export killed between moving the old export aside and renaming the new one in left only
    ``.old-meds-PID-…`` and ``.tmp-meds-PID-…``: the next run puts the old export back (and so refuses to
    write over it without --force) and removes the unfinished one."""
    src = _three_split_meds(tmp_path)
    parent = tmp_path / "exports"
    out = parent / "meds"
    runner = CliRunner()
    assert runner.invoke(main, ["export-meds", str(out), "--meds", str(src)]).exit_code == 0
    dead = _dead_pid()
    os.rename(out, parent / f".old-meds-{dead}-0123abcd")
    (parent / f".tmp-meds-{dead}-89abcdef" / "data").mkdir(parents=True)
    res = runner.invoke(main, ["export-meds", str(out), "--meds", str(src)])
    _clean_exit(res, 1, str(out), "exists", "--force")
    assert (out / "metadata" / "dataset.json").is_file() and _hidden(parent) == []
    res = runner.invoke(main, ["export-meds", str(out), "--meds", str(src), "--force"])
    assert res.exit_code == 0, res.output
    assert _hidden(parent) == []


def test_a_compile_cleans_a_dead_compiles_temp(tmp_path):
    parent = tmp_path / "programs"
    first = compile_ontology(FIXTURE, out=parent, name="mini")
    dead = _dead_pid()
    stale = first.path.parent / f".tmp-{'0' * 16}-{dead}-0123abcd"
    stale.mkdir()
    compile_ontology(FIXTURE, out=parent, name="mini", icd_hierarchy=False)  # another program, same parent
    assert not stale.exists()


# --- 4: one process trains a run --------------------------------------------------------------------------

HOLD = (
    "import sys, time\n"
    "from pipelines.train.run_lock import lock_run\n"
    "lock_run(sys.argv[1])\n"
    "print('locked', flush=True)\n"
    "time.sleep(300)\n"
)


@pytest.fixture
def holder():
    """Start a process holding a run folder's lock (as a training process does); killed at the end."""
    procs = []

    def start(run: Path) -> subprocess.Popen:
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        p = subprocess.Popen(
            [sys.executable, "-c", HOLD, str(run)], stdout=subprocess.PIPE, env=env, cwd=ROOT
        )
        procs.append(p)
        assert p.stdout.readline().strip() == b"locked"
        return p

    yield start
    for p in procs:
        p.kill()
        p.wait()


def test_a_run_in_use_is_refused_by_name_and_released_by_a_kill(tmp_path, holder):
    run = tmp_path / "run"
    run.mkdir()
    (run / "config.json").write_text(json.dumps({"config": {"a": 1}}))
    p = holder(run)
    with pytest.raises(RunInUseError) as e:
        open_run(run, {"config": {"a": 1}}, resume=True)
    assert str(e.value).startswith(f"run folder {run} is in use by pid {p.pid}")
    p.send_signal(signal.SIGKILL)  # a killed trainer never leaves its run locked
    p.wait()
    with lock_scope():
        assert open_run(run, {"config": {"a": 1}}, resume=True) is None
        with lock_scope():
            open_run(run, {"config": {"a": 1}}, resume=True)  # re-entrant in one process
    assert (run / LOCK_FILE).read_text().strip() == str(os.getpid())


def test_a_resume_of_nothing_creates_nothing(tmp_path):
    with pytest.raises(PipelineError, match="missing; nothing to resume"):
        open_run(tmp_path / "none", {"config": {}}, resume=True)
    assert not (tmp_path / "none").exists()


def test_the_lock_is_released_when_the_training_call_ends(tmp_path):
    run = tmp_path / "run"
    with lock_scope():
        open_run(run, {"config": {}}, resume=False)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    code = "import sys; from pipelines.train.run_lock import lock_run; lock_run(sys.argv[1])"
    subprocess.run([sys.executable, "-c", code, str(run)], env=env, cwd=ROOT, check=True, timeout=60)


PRETRAIN = {
    "model": "tiny",
    "mode": "base",
    "batch_size": 8,
    "max_steps": 6,
    "save_every": 2,
    "log_every": 1,
    "max_val": 8,
    "mlm_cache": "off",
}


def _pretrain_args(dataset, program, out):
    args = ["pretrain", str(dataset), "--program", str(program), "--out", str(out), "--device", "cpu"]
    for k, v in PRETRAIN.items():
        args += [f"--{k.replace('_', '-')}", str(v)]
    return [*args, "--no-progress", "--resume"]


def _steps(run: Path) -> list[int]:
    rows = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    return [r["step"] for r in rows if "loss" in r]


def test_a_second_pretrain_resume_is_refused_while_one_trains(
    tmp_path,
    holder,
    dataset_dir,  # noqa: F811
    program_dir,  # noqa: F811
    one_thread,
):
    from pipelines.train.pretrain import pretrain, resumable

    out = tmp_path / "runs"
    r = pretrain(dataset_dir, program_dir, out=out, device="cpu", progress=False, stop_after=4, **PRETRAIN)
    run = r.run_dir
    before = (run / "metrics.jsonl").read_text()
    p = holder(run)  # the first resume, still training
    res = CliRunner().invoke(main, _pretrain_args(dataset_dir, program_dir, out))
    _clean_exit(res, 1, f"run folder {run} is in use by pid {p.pid}")
    assert (run / "metrics.jsonl").read_text() == before  # nothing trained, nothing written
    p.kill()  # the first one ends: the run can be resumed, and each step is trained once
    p.wait()
    res = CliRunner().invoke(main, _pretrain_args(dataset_dir, program_dir, out))
    assert res.exit_code == 0, res.output
    assert _steps(run) == [1, 2, 3, 4, 5, 6]
    shutil.rmtree(run / "checkpoints")  # a run started but never checkpointed, which another process trains
    holder(run)
    with pytest.raises(RunInUseError):  # an experiment's restart refuses it rather than removing it
        resumable(run)
    assert (run / "config.json").is_file()


# --- 5: checkpoint fields are checked on resume -------------------------------------------------------


class _Toy:
    def __init__(self):
        self.x = torch.randn(16, 4, generator=torch.Generator().manual_seed(0))

    def epoch_batches(self, epoch):
        return list(torch.arange(16).split(4))

    def step(self, net, idx, step):
        return StepOutput((net(self.x[idx]) ** 2).mean(), float(len(idx)), len(idx))

    def validate(self, model):
        return {"val": 0.0}


def _toy_run(run: Path, steps: int = 4):
    torch.manual_seed(0)
    model = nn.Linear(4, 1)
    opt = torch.optim.AdamW(model.parameters(), lr=0.01)
    opts = LoopOptions(total_steps=steps, log_every=2, val_every=2, progress=False, config={"toy": 1})
    return model, opt, opts


def _edited_checkpoint(tmp_path, edit, name=None) -> tuple[Path, Path]:
    run = tmp_path / "run"
    model, opt, opts = _toy_run(run)
    run_loop(model, opt, None, _Toy(), opts, run)
    ckpt = list_checkpoints(run)[-1]
    state = torch.load(ckpt, weights_only=True)
    edit(state)
    target = ckpt if name is None else ckpt.with_name(name)
    torch.save(state, target)
    if target != ckpt:
        ckpt.unlink()
    return run, target


@pytest.mark.parametrize(
    ("edit", "name", "needle"),
    [
        (lambda s: s.update(step=-7), "step-00000007.pt", "field 'step' is -7; expected a whole number >= 0"),
        (lambda s: s.update(step=2.5), None, "field 'step' is 2.5; expected a whole number >= 0"),
        (lambda s: s.update(step="4"), None, "field 'step' is '4'; expected a whole number >= 0"),
        (lambda s: s.update(position=-1), None, "field 'position' is -1"),
        (lambda s: s.update(step=3), None, "field 'step' is 3; the file is named for step 4"),
        (lambda s: s.update(step=99), "step-00000099.pt", "field 'step' is 99, beyond the 8 steps this run"),
        (lambda s: s.pop("epoch"), None, "checkpoint incomplete, missing ['epoch']"),
        (lambda s: s.update(optimizer=[1]), None, "field 'optimizer' is a list; expected a dictionary"),
        (lambda s: s["loop"].update(stray=1), None, "field 'loop' has keys ['stray']"),
    ],
    ids=["negative", "float", "text", "position", "not-its-name", "beyond", "missing", "list", "loop-key"],
)
def test_a_checkpoint_with_bad_fields_is_refused_naming_file_and_field(tmp_path, edit, name, needle):
    run, ckpt = _edited_checkpoint(tmp_path, edit, name)
    model, opt, _ = _toy_run(run)
    opts = LoopOptions(total_steps=8, log_every=2, val_every=2, progress=False, config={"toy": 1})
    before = model.weight.detach().clone()
    with pytest.raises(CheckpointError) as e:
        run_loop(model, opt, None, _Toy(), opts, run, resume_from=ckpt)
    assert str(e.value).startswith(f"{ckpt}: ") and needle in str(e.value), str(e.value)
    assert torch.equal(model.weight, before)  # nothing loaded


def test_a_checkpoint_with_step_minus_7_through_the_cli(
    tmp_path,
    dataset_dir,  # noqa: F811
    program_dir,  # noqa: F811
    one_thread,
):
    from pipelines.train.pretrain import pretrain

    out = tmp_path / "runs"
    r = pretrain(dataset_dir, program_dir, out=out, device="cpu", progress=False, stop_after=4, **PRETRAIN)
    ckpt = list_checkpoints(r.run_dir)[-1]
    state = torch.load(ckpt, weights_only=True)
    state["step"] = -7
    torch.save(state, ckpt)
    res = CliRunner().invoke(main, _pretrain_args(dataset_dir, program_dir, out))
    _clean_exit(res, 1, str(ckpt), "checkpoint field 'step' is -7")
    assert checkpoint_path(r.run_dir, 4) == ckpt


# --- 6: a carry to a program that shares nothing ------------------------------------------------------


@pytest.fixture(scope="module")
def carry_programs(tmp_path_factory):
    from hrr_kernel import load_program
    from model import HRRBert, bert_tiny

    root = tmp_path_factory.mktemp("carry")
    old = write_old_program(root / "old")
    new = write_new_program(root / "new")
    unrelated = _write(
        root / "unrelated",
        [*SPECIALS, "Z001", "Z002"],
        [("special", s) for s in SPECIALS] + [("concept", "900"), ("word", "rash")],
        [("is_a", 116680003), ("description", None), ("identity", None)],
        {"Z001": [("is_a", ("concept", "900"))], "Z002": [("description", ("word", "rash"))]},
    )
    torch.manual_seed(0)
    model = HRRBert(bert_tiny(dim=16, n_layers=1, n_heads=2, ffn_dim=32, mode="cat"), load_program(old))
    saved = root / "model"
    model.save_pretrained(saved)
    return saved, new, unrelated


@pytest.mark.parametrize("command", ["carry", "transfer"])
def test_a_carry_to_a_program_sharing_nothing_is_refused(tmp_path, carry_programs, command):
    saved, _, unrelated = carry_programs
    out = tmp_path / "out"
    res = CliRunner().invoke(main, [command, str(saved), "--program", str(unrelated), "--out", str(out)])
    _clean_exit(
        res,
        1,
        str(unrelated),
        "shares no code and no concept or ICD node atom with the model's program",
        "(0 of its 2 codes, 0 of 1 concept atoms, 0 of 1 word atoms",
        "only the special tokens' rows",
    )
    assert not out.exists() and _hidden(tmp_path) == []


def test_a_carry_with_a_small_overlap_is_warned_with_the_counts(tmp_path, carry_programs, caplog):
    from pipelines.ontology.carry import carry

    saved, new, _ = carry_programs
    with caplog.at_level(logging.WARNING, logger="pipelines.ontology.carry"):
        r = carry(saved, new, tmp_path / "out", init="zero")
    assert r.report["tokens"]["carried"] == 7  # 5 special tokens and A001, A003
    said = [m for m in caplog.messages if "shares little" in m]
    assert said and "2 of its 8 codes" in said[0], caplog.messages


def test_an_input_error_is_the_projects_own(tmp_path):
    """The walk's errors are the readers' InputFileError (exit 1 through the CLI's one mapping)."""
    from ontology_compiler.api import walk_files

    (tmp_path / "x").symlink_to(tmp_path / "nowhere")
    with pytest.raises(InputFileError, match="which does not exist"):
        walk_files(tmp_path, lambda n: True, error=InputFileError)
