"""Hostile inputs that used to end in a Python traceback (a RuntimeError out of ``load_state_dict``, a
480 GB allocation, a MemoryError, ``_csv.Error``, ``FileNotFoundError``, an ``AssertionError`` out of torch,
a read of ``/dev/zero``, a dimension of 10^8) are refused with one error naming the file or option and
what was expected: exit 1 (2 for a usage error), no traceback, nothing half-written."""

from __future__ import annotations

import gzip
import json
import shutil

import pytest
import torch
from cli_exit import clean_exit as _clean_exit
from click.testing import CliRunner
from ehr_fixtures import assert_refused, mini_program, prepare_cli, write_mimic
from safetensors.torch import load_file, save_file
from torch import nn

from hrr_kernel import HashMismatchError, ProgramError, load_program
from model import HRRBert, PretrainedFileError, bert_tiny
from pipelines.cli import main
from pipelines.errors import PipelineError
from pipelines.train.checkpoint import CheckpointError, list_checkpoints
from pipelines.train.loop import LoopOptions, StepOutput, run_loop
from pipelines.train.runtime import check_device


@pytest.fixture(scope="module")
def program(tmp_path_factory):
    return mini_program(tmp_path_factory.mktemp("programs"))


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory, program):
    """A tiny saved HRRBERT (16 wide, one layer) with its program copy."""
    torch.manual_seed(0)
    d = tmp_path_factory.mktemp("model") / "model"
    HRRBert(bert_tiny(dim=16, n_layers=1, n_heads=2, ffn_dim=32), load_program(program)).save_pretrained(d)
    return d


def _copy(src, dst):
    shutil.copytree(src, dst)
    return dst


# --- 1 and 3: a checkpoint of another model, a tensor of the wrong shape -------------------------------


class _Toy:
    def __init__(self):
        self.x, self.y = torch.randn(16, 4, generator=torch.Generator().manual_seed(0)), torch.zeros(16)

    def epoch_batches(self, epoch):
        return list(torch.arange(16).split(4))

    def step(self, net, idx, step):
        return StepOutput(((net(self.x[idx]).sum(1) - self.y[idx]) ** 2).mean(), float(len(idx)), len(idx))

    def validate(self, model):
        return {"val": 0.0}


def _loop(width: int):
    torch.manual_seed(0)
    model = nn.Linear(4, width)
    return model, torch.optim.AdamW(model.parameters(), lr=0.01)


def _opts(steps):
    return LoopOptions(total_steps=steps, log_every=2, val_every=2, progress=False, config={"toy": 1})


def test_resume_from_a_checkpoint_of_another_model_names_file_and_shapes(tmp_path):
    run = tmp_path / "run"
    model, opt = _loop(1)
    run_loop(model, opt, None, _Toy(), _opts(4), run)
    ckpt = list_checkpoints(run)[-1]
    other, opt2 = _loop(3)
    before = other.weight.detach().clone()
    with pytest.raises(CheckpointError) as e:
        run_loop(other, opt2, None, _Toy(), _opts(8), run, resume_from=ckpt)
    msg = str(e.value)
    assert str(ckpt) in msg and "does not match the run's model" in msg
    assert "weight expected [3, 4] found [1, 4]" in msg and "\n" not in msg
    assert torch.equal(other.weight, before)  # nothing loaded


def test_resume_with_a_missing_tensor_names_it(tmp_path):
    run = tmp_path / "run"
    model, opt = _loop(1)
    run_loop(model, opt, None, _Toy(), _opts(4), run)
    ckpt = list_checkpoints(run)[-1]
    other = nn.Linear(4, 1, bias=False)
    with pytest.raises(CheckpointError, match=r"unexpected: bias"):
        run_loop(other, torch.optim.AdamW(other.parameters()), None, _Toy(), _opts(8), run, resume_from=ckpt)


def test_model_weights_with_a_wrong_shaped_tensor_name_tensor_and_shapes(model_dir, tmp_path):
    d = _copy(model_dir, tmp_path / "m")
    w = d / "model.safetensors"
    state = load_file(str(w))
    state["mlm.dense.weight"] = torch.zeros(16, 17)
    save_file(state, str(w), metadata={"format": "pt"})
    with pytest.raises(PretrainedFileError) as e:
        HRRBert.from_pretrained(d)
    msg = str(e.value)
    assert str(w) in msg and "mlm.dense.weight expected [16, 16] found [16, 17]" in msg


# --- 2: a config.json claiming huge sizes -----------------------------------------------------------------


def _edit_config(d, **sizes):
    p = d / "config.json"
    meta = json.loads(p.read_text())
    meta["config"].update(sizes)
    p.write_text(json.dumps(meta))


@pytest.mark.parametrize(
    ("sizes", "needle"),
    [
        ({"dim": 1 << 20, "n_heads": 2}, "'dim' is 1048576, beyond the largest supported size"),
        ({"n_layers": 500_000}, "'n_layers' is 500000, beyond"),
        ({"dim": 4096, "ffn_dim": 1 << 18, "n_layers": 1}, "embeddings.position.weight has shape [128, 16]"),
        ({"n_layers": 40}, "config 'n_layers' is 40 but model.safetensors holds 1 layers"),
        ({"max_len": 1 << 19}, "(max_len, dim) = [524288, 16]"),
    ],
)
def test_config_with_huge_sizes_is_refused_before_allocating(model_dir, tmp_path, monkeypatch, sizes, needle):
    d = _copy(model_dir, tmp_path / "m")
    _edit_config(d, **sizes)
    built = []
    monkeypatch.setattr(HRRBert, "_init_weights", lambda self: built.append(1))
    with pytest.raises(PretrainedFileError) as e:
        HRRBert.from_pretrained(d)
    assert str(d / "config.json") in str(e.value) and needle in str(e.value), str(e.value)
    assert built == []  # refused before the model was built


def test_config_with_huge_sizes_through_the_cli(model_dir, tmp_path):
    d = _copy(model_dir, tmp_path / "m")
    _edit_config(d, dim=1 << 24, n_heads=1)
    res = CliRunner().invoke(main, ["explain", str(d), "E119"])
    _clean_exit(res, 1, "config.json", "'dim' is 16777216")


# --- 4 and 5: a gzip bomb, CR-only line endings -----------------------------------------------------------


def _bomb(path, header: bytes, line_bytes: int):
    with gzip.open(path, "wb", compresslevel=1) as f:
        f.write(header)
        block = b"0" * (1 << 20)
        for _ in range(line_bytes >> 20):
            f.write(block)


def test_gzip_bomb_in_a_data_line_is_refused_by_name(program, tmp_path):
    from pipelines.data.readers.common import MAX_LINE_BYTES

    root = write_mimic(tmp_path / "m")
    p = root / "hosp" / "diagnoses_icd.csv.gz"
    header = gzip.open(p, "rb").readline()
    _bomb(p, header, MAX_LINE_BYTES + (1 << 20))
    out = tmp_path / "out"
    msg = assert_refused(
        prepare_cli("--mimic", root, out=out, program=program), out, "diagnoses_icd.csv.gz", "line 2"
    )
    assert "longer than 8 MB once decompressed" in msg and "gzip bomb" in msg


def test_gzip_bomb_in_the_header_is_refused_by_name(program, tmp_path):
    from pipelines.data.readers.common import MAX_LINE_BYTES

    root = write_mimic(tmp_path / "m")
    p = root / "hosp" / "admissions.csv.gz"
    _bomb(p, b"", MAX_LINE_BYTES + (1 << 20))
    out = tmp_path / "out"
    assert_refused(
        prepare_cli("--mimic", root, out=out, program=program),
        out,
        "admissions.csv.gz, line 1",
        "longer than 8 MB",
    )


def test_cr_only_line_endings_are_refused_by_name(program, tmp_path):
    root = write_mimic(tmp_path / "m")
    p = root / "hosp" / "diagnoses_icd.csv.gz"
    text = gzip.open(p, "rb").read().replace(b"\r\n", b"\n").replace(b"\n", b"\r")
    p.write_bytes(gzip.compress(text))
    out = tmp_path / "out"
    assert_refused(
        prepare_cli("--mimic", root, out=out, program=program),
        out,
        "diagnoses_icd.csv.gz, line 1",
        "CR-only line endings",
        "expected LF or CRLF",
    )


# --- 6: a program folder that is not a whole program ------------------------------------------------------


def test_prepare_with_a_program_missing_concepts_names_the_file(program, tmp_path):
    root = write_mimic(tmp_path / "m")
    listed = _copy(program, tmp_path / "p1")
    (listed / "concepts.parquet").unlink()
    out = tmp_path / "out"
    assert_refused(prepare_cli("--mimic", root, out=out, program=listed), out, "concepts.parquet", "missing")
    unlisted = _copy(program, tmp_path / "p2")
    (unlisted / "concepts.parquet").unlink()
    m = json.loads((unlisted / "manifest.json").read_text())
    m["files"] = [f for f in m["files"] if f["path"] != "concepts.parquet"]
    (unlisted / "manifest.json").write_text(json.dumps(m))
    assert_refused(
        prepare_cli("--mimic", root, out=out, program=unlisted),
        out,
        "manifest.json",
        "does not list the program file(s) concepts.parquet",
    )


def test_prepare_with_a_dataset_as_program_says_so(program, tmp_path):
    root = write_mimic(tmp_path / "m")
    first = tmp_path / "first"
    assert prepare_cli("--mimic", root, out=first, program=program).exit_code == 0
    (dataset,) = [p for p in first.glob("*/*") if p.is_dir()]
    out = tmp_path / "out"
    assert_refused(
        prepare_cli("--mimic", root, out=out, program=dataset),
        out,
        str(dataset),
        "this is a dataset folder, not a program",
    )


# --- 7: --device cuda without CUDA ------------------------------------------------------------------------


no_cuda = pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has CUDA")


@no_cuda
def test_check_device_names_the_available_devices():
    with pytest.raises(PipelineError) as e:
        check_device("cuda")
    assert str(e.value) == (
        "--device 'cuda': not available on this machine (torch sees no CUDA device); "
        "expected one of: auto, cpu"
    )
    with pytest.raises(PipelineError, match="'gpu0': not a device name"):
        check_device("gpu0")
    assert check_device("cpu") == "cpu" and check_device("auto") == "auto"


@no_cuda
@pytest.mark.parametrize("command", ["explain", "export-embeddings"])
def test_device_cuda_without_cuda_is_a_usage_error(model_dir, tmp_path, command):
    args = [str(model_dir), "E119"] if command == "explain" else [str(model_dir), str(tmp_path / "out")]
    res = CliRunner().invoke(main, [command, *args, "--device", "cuda"])
    _clean_exit(res, 2, "--device", "'cuda': not available on this machine", "expected one of: auto, cpu")
    assert not (tmp_path / "out").exists()


# --- 8: a program file that never ends -------------------------------------------------------------------


def test_program_file_that_is_dev_zero_is_refused_by_name(program, tmp_path):
    p = _copy(program, tmp_path / "p")
    (p / "edges.parquet").unlink()
    (p / "edges.parquet").symlink_to("/dev/zero")
    with pytest.raises(ProgramError, match=r"edges.parquet is not a regular file"):
        load_program(p)
    root = write_mimic(tmp_path / "m")
    out = tmp_path / "out"
    assert_refused(
        prepare_cli("--mimic", root, out=out, program=p), out, "edges.parquet", "not a regular file"
    )
    res = CliRunner().invoke(main, ["diff", str(program), str(p), "--out", str(tmp_path / "diff")])
    _clean_exit(res, 1, "edges.parquet", "not a regular file")


def test_program_file_longer_than_its_manifest_is_not_read_whole(program, tmp_path):
    from hrr_kernel.program import sha256_file

    p = _copy(program, tmp_path / "p")
    f = p / "edges.parquet"
    size = f.stat().st_size
    f.write_bytes(f.read_bytes() + bytes(10 << 20))
    with pytest.raises(HashMismatchError, match=rf"not hashed: more than the {size:,} bytes"):
        load_program(p)
    assert sha256_file(f, limit=size) is None and sha256_file(f, limit=None) is not None


# --- 9: export-embeddings --dim 100000000 -----------------------------------------------------------------


def test_export_embeddings_huge_dim_is_a_usage_error(program, tmp_path):
    out = tmp_path / "out"
    res = CliRunner().invoke(main, ["export-embeddings", str(program), str(out), "--dim", "100000000"])
    _clean_exit(res, 2, "--dim", "100000000", "expected 1 to 65536")
    assert not out.exists()
