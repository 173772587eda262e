"""benchmarks/kernel.py's methods run on a tiny program (no timings asserted): (d) spectral and (e) batch
rows give the right output and gradient shapes, (e) equals the full matrix's rows, the goals list says
met / not met, the workers' allocator settings, and benchmarks/gpu.sh parses."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from hrr_kernel import compose, load_program
from tests.helpers.synthetic_program import random_edges, write_program

ROOT = Path(__file__).resolve().parents[2]
N_CONCEPTS, N_ATOMS, N_RELATIONS = 30, 12, 4


def _load(name: str):
    """A benchmarks/ script as a module (benchmarks/ is no package), named ``benchmarks_<name>``."""
    name, path = f"benchmarks_{name.lstrip('_')}", ROOT / "benchmarks" / f"{name}.py"
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules.setdefault(name, mod)
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture(scope="module")
def methods():
    return _load("_kernel_methods")


@pytest.fixture(scope="module")
def program(tmp_path_factory):
    root = tmp_path_factory.mktemp("kernel_methods") / "p"
    edges = random_edges(np.random.default_rng(3), N_CONCEPTS, N_ATOMS, N_RELATIONS, 120)
    write_program(root, n_concepts=N_CONCEPTS, n_atoms=N_ATOMS, n_relations=N_RELATIONS, edges=edges)
    return load_program(root)


@pytest.mark.parametrize("dim", [16, 15])
@pytest.mark.parametrize("method", ["spectral", "batch_rows", "batch_rows_sparse", "batch_rows_spectral"])
def test_measure_runs_spectral_and_batch_rows(methods, program, method, dim, one_thread):
    r = methods.measure(program, method, dim, reps=2, warmup=1)
    assert r["method"] == method and r["memory"] == "rss" and r["device"] == "cpu"
    for key in ("forward", "forward_backward", "peak_extra_mib", "threads"):
        assert key in r
    assert len(r["forward_all"]) == len(r["forward_backward_all"]) == 2
    rows = methods.BATCH * methods.SEQ if method.startswith("batch_rows") else N_CONCEPTS
    width = 2 * (dim // 2 + 1) if method == "spectral" else dim
    assert r["output_shape"] == [rows, width]
    grad_width = 2 * (dim // 2 + 1) if method == "batch_rows_spectral" else dim  # half spectra
    assert r["grad_shapes"] == [[N_ATOMS, grad_width], [N_RELATIONS, grad_width]]
    if method.startswith("batch_rows"):
        assert r["rows"] == rows and 1 <= r["distinct_rows"] <= N_CONCEPTS


def test_batch_rows_are_the_matrix_rows(methods, program, one_thread):
    g = torch.Generator().manual_seed(0)
    a = torch.randn(program.n_atoms, 8, dtype=torch.float64, generator=g)
    r = torch.randn(program.n_relations, 8, dtype=torch.float64, generator=g)
    run = methods.batch_rows_method(program, 8)
    torch.testing.assert_close(run(a, r), compose(program, a, r)[run.ids])
    spectra = [torch.view_as_real(torch.fft.rfft(x, dim=1)).reshape(x.shape[0], -1) for x in (a, r)]
    run = methods.batch_rows_spectral_method(program, 8)  # the same rows from the half spectra
    torch.testing.assert_close(run(*spectra), compose(program, a, r)[run.ids])


def test_batch_ids_are_seeded_and_in_range(methods):
    ids = methods.batch_ids(1000, n=4096, seed=5)
    assert ids.dtype == torch.int64 and ids.shape == (4096,)
    assert 0 <= int(ids.min()) and int(ids.max()) < 1000
    assert torch.equal(ids, methods.batch_ids(1000, n=4096, seed=5))
    # Zipf-like: fewer distinct codes than uniform draws of the same size
    assert torch.unique(ids).numel() < torch.unique(methods.batch_ids(1000, n=4096, seed=5, s=0.0)).numel()


def test_goals_say_met_and_not_met():
    kernel = _load("kernel")
    rows = [
        {"method": "ours", "forward": 0.5, "forward_backward": 4.0, "peak_extra_mib": 300.0, "threads": 2},
        {
            "method": "spectral",
            "forward": 40.0,
            "forward_backward": 90.0,
            "peak_extra_mib": 200.0,
            "threads": 2,
        },
        {"method": "batch_rows", "error": "timed out"},
    ]
    lines, goals = kernel.goals(rows, "cpu", kernel.PAPER_CONCEPTS)
    verdicts = {(g["method"], g["key"]): g["verdict"] for g in goals}
    assert verdicts == {
        ("spectral", "forward_backward"): "met",
        ("batch_rows", "forward_backward"): "not measured",
        ("batch_rows_sparse", "forward_backward"): "not measured",
        ("batch_rows_spectral", "forward_backward"): "not measured",
        ("ours", "peak_extra_mib"): "met",
        ("spectral", "peak_extra_mib"): "not met",
    }
    _, goals = kernel.goals(rows, "cuda", kernel.PAPER_CONCEPTS)
    verdicts = {(g["method"], g["key"]): g["verdict"] for g in goals}
    assert verdicts[("ours", "forward")] == "met" and verdicts[("ours", "forward_backward")] == "not met"
    assert ("spectral", "forward_backward") not in verdicts  # a 2-core CPU goal


def test_worker_env_sets_or_removes_the_commands_allocator(monkeypatch):
    """The workers get glibc's keep-freed settings (as the hrrbert command sets them) or none of them."""
    from pipelines.cli.allocator import ENV, KEEP_FREED_ENV

    kernel = _load("kernel")
    monkeypatch.setenv("MALLOC_MMAP_MAX_", "7")
    monkeypatch.setenv(ENV, "default")
    keep = kernel.worker_env("keep")
    assert {k: keep[k] for k in KEEP_FREED_ENV} == KEEP_FREED_ENV and ENV not in keep
    default = kernel.worker_env("default")
    assert not set(KEEP_FREED_ENV) & set(default) and ENV not in default
    assert default["PATH"] == keep["PATH"]  # the rest of the environment passes through
    with pytest.raises(ValueError, match="keep or default"):
        kernel.worker_env("jemalloc")


def test_gpu_script_parses():
    res = subprocess.run(["bash", "-n", str(ROOT / "benchmarks" / "gpu.sh")], capture_output=True, text=True)
    assert res.returncode == 0, res.stderr
