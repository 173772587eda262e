"""Benchmark the HRR concept-matrix composer against the paper's method and torchhd.

Usage::

    python benchmarks/kernel.py                 # paper scale + scale sweep (5k, 25k, 100k, 350k)
    python benchmarks/kernel.py --quick         # small and fast (smoke run)
    python benchmarks/kernel.py --no-350k       # sweep without the 350k point
    python benchmarks/kernel.py --program artifacts/programs/<release>/<id>   # also a compiled program
    python benchmarks/kernel.py --device cuda --no-sweep --json out.json       # on a GPU, rows as JSON
    python benchmarks/kernel.py --allocator keep      # glibc keeping freed memory, as hrrbert runs

Every number is measured in this run; each (program, method) runs in a fresh process so that peak
resident memory (VmHWM above the post-setup RSS) is attributable to it; on ``--device cuda`` the memory
is GPU memory (peak allocated above the allocation after setup) and timings are synchronised. Times are
medians. Below the main table a short list says which goals of issue #15 the run met: on the CPU (2
cores) (d) fwd+bwd <= 100 ms, (e) fwd+bwd <= 10 ms, peak extra <= 512 MiB for (c) and <= 150 MiB for (d);
on CUDA also (c) forward <= 1 ms and fwd+bwd <= 3 ms.

The workers run with glibc as it starts (``--allocator default``: every large temporary is fresh ``mmap``
memory, faulted in again each call), or with the setting the ``hrrbert`` command makes (``--allocator
keep``: freed memory stays in the process, :mod:`pipelines.cli.allocator`), which is faster and keeps a
larger peak (fragmentation: on the 2-core VM (c) 227 -> 139 ms fwd+bwd, peak extra 458 -> 912 MiB). The
table's title says which.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

CACHE = ROOT / "benchmarks" / "_cache"
PAPER_CONCEPTS = 25_493  # tests.helpers.synthetic_program.PAPER["n_concepts"]
SWEEP = (5_000, 25_000, 100_000, 350_000)
QUICK_SWEEP = (2_000, 5_000)
WORKER_METHODS = (
    "paper",
    "torchhd",
    "ours",
    "spectral",
    "spectral_atoms",
    "batch_rows",
    "batch_rows_sparse",
    "batch_rows_spectral",
    "fft_floor",
)
ALLOCATORS = {
    "keep": "glibc keeps freed memory, as the hrrbert command sets it (--allocator keep)",
    "default": "glibc as it starts, freed large blocks handed back to the kernel (--allocator default)",
}
BATCH_LABEL = "32 x 128 codes"  # _kernel_methods.BATCH x SEQ
# issue #15: (method, measured key, limit, unit, devices the goal is stated for, what it says)
GOALS = (
    ("spectral", "forward_backward", 100.0, "ms", ("cpu",), "(d) spectral fwd+bwd (2 cores)"),
    ("batch_rows", "forward_backward", 10.0, "ms", ("cpu", "cuda"), "(e) batch rows fwd+bwd"),
    (
        "batch_rows_sparse",
        "forward_backward",
        10.0,
        "ms",
        ("cpu", "cuda"),
        "(e') batch rows fwd+bwd, sparse atom gradient (issue 32)",
    ),
    (
        "batch_rows_spectral",
        "forward_backward",
        10.0,
        "ms",
        ("cpu", "cuda"),
        "(e'') batch rows fwd+bwd, sparse gradient, spectral atoms (issue 32)",
    ),
    ("ours", "peak_extra_mib", 512.0, "MiB", ("cpu", "cuda"), "(c) peak extra memory"),
    ("spectral", "peak_extra_mib", 150.0, "MiB", ("cpu", "cuda"), "(d) peak extra memory"),
    ("ours", "forward", 1.0, "ms", ("cuda",), "(c) full forward"),
    ("ours", "forward_backward", 3.0, "ms", ("cuda",), "(c) full fwd+bwd"),
)


def synthetic_program(n_concepts: int, shared: float = 0.0, seed: int = 0) -> Path:
    """Write (once, cached) a paper-shaped synthetic program with ``n_concepts`` codes."""
    from tests.helpers.synthetic_program import cached_paper_program

    return cached_paper_program(CACHE, n_concepts, shared=shared, seed=seed)


def run_worker(
    program: Path,
    method: str,
    dim: int,
    reps: int,
    warmup: int,
    timeout: float,
    device: str = "cpu",
    native: bool = True,
    allocator: str = "default",
) -> dict:
    """One (program, method) in a fresh process; ``native=False`` runs it with ``HRRBERT_NATIVE=0``
    (the torch path of a batch's rows, the baseline of the native kernels); ``allocator``: ``keep`` (glibc
    keeps freed memory, as the ``hrrbert`` command sets it) or ``default``."""
    cmd = [sys.executable, __file__, "--worker", method, "--program", str(program), "--dim", str(dim)]
    cmd += ["--reps", str(reps), "--warmup", str(warmup), "--device", device]
    env = worker_env(allocator)
    if not native:
        env["HRRBERT_NATIVE"] = "0"
    try:
        res = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, check=False, env=env)
    except subprocess.TimeoutExpired:
        return {"method": method, "error": f"timed out after {timeout:.0f} s"}
    lines = [ln for ln in res.stdout.splitlines() if ln.startswith("{")]
    if res.returncode != 0 or not lines:
        tail = (res.stderr or res.stdout).strip().splitlines()[-1:] or ["no output"]
        return {"method": method, "error": f"exit {res.returncode}: {tail[0][:120]}"}
    return json.loads(lines[-1])


def worker_env(allocator: str) -> dict[str, str]:
    """The workers' environment: this one with glibc told to keep freed memory (``keep``, what the
    ``hrrbert`` command sets) or with those settings removed (``default``)."""
    from pipelines.cli.allocator import ENV, KEEP_FREED_ENV

    env = {k: v for k, v in os.environ.items() if k not in KEEP_FREED_ENV and k != ENV}
    if allocator not in ALLOCATORS:
        raise ValueError(f"allocator must be keep or default, got {allocator!r}")
    if allocator == "keep":
        env.update(KEEP_FREED_ENV)
    return env


def worker(args: argparse.Namespace) -> None:
    import torch

    from benchmarks._kernel_methods import measure
    from hrr_kernel import load_program, native

    torch.set_num_threads(args.threads or torch.get_num_threads())
    program = load_program(args.program, device=args.device)
    result = measure(program, args.worker, args.dim, args.reps, args.warmup, device=args.device)
    result["counts"] = program.counts
    result["native"] = native.available() and args.device == "cpu"  # plans of selected rows only
    print(json.dumps(result))


def program_stats(root: Path) -> dict:
    from hrr_kernel import load_program

    p = load_program(root)
    c = p.counts
    pairs_cr = len(set(zip(p.edge_concept.tolist(), p.edge_relation.tolist(), strict=True)))
    c["concept_relation_pairs"] = pairs_cr
    c["max_multiplicity"] = int(p.edge_slot.max()) + 1 if p.n_edges else 0
    return c


def fmt(x: float | None, nd: int = 0) -> str:
    return "–" if x is None or x != x else f"{x:,.{nd}f}"


def memory_label(device: str) -> str:
    return "peak extra GPU memory (MiB)" if device.startswith("cuda") else "peak extra RSS (MiB)"


def table(rows: list[dict], ref: dict | None, device: str = "cpu") -> list[str]:
    """The rows as a Markdown table; speed-ups against (a) ``ref`` for whole-matrix methods and
    against the same method on the torch path (``HRRBERT_NATIVE=0``) for a batch's rows."""
    memory = memory_label(device)
    nd = 3 if device.startswith("cuda") else 1  # GPU times are fractions of a millisecond
    torch_path = {r["method"]: r for r in rows if "error" not in r and r.get("torch_path")}
    out = [
        f"| method | forward (ms) | fwd+bwd (ms) | bwd/fwd | {memory} | "
        "fwd speed-up vs (a) or torch path | fwd+bwd speed-up vs (a) or torch path |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        if "error" in r:
            out.append(f"| {r['label']} | {r['error']} | | | | | |")
            continue
        f, fb = r["forward"], r["forward_backward"]
        # (e): a batch's rows, not the matrix; they are read against the same method on the torch path
        base = torch_path.get(r["method"]) if r["method"].startswith("batch_rows") else ref
        comparable = base is not None and base is not r
        ratio_f = base["forward"] / f if comparable else None
        ratio_fb = base["forward_backward"] / fb if comparable else None
        out.append(
            f"| {r['label']} | {fmt(f, nd)} | {fmt(fb, nd)} | {fmt((fb - f) / f, 2)} | "
            f"{fmt(r['peak_extra_mib'])} | "
            f"{fmt(ratio_f, 1) + 'x' if ratio_f else '–'} | "
            f"{fmt(ratio_fb, 1) + 'x' if ratio_fb else '–'} |"
        )
    return out


def compare(root: Path, title: str, args, baselines: bool) -> tuple[list[str], dict]:
    """One program's table; returns its lines and ``{"title", "program", "stats", "rows"}``."""
    stats = program_stats(root)
    lines = [
        f"### {title}",
        "",
        f"program {root.name}: {stats['concepts']:,} concepts, {stats['atoms']:,} atoms, "
        f"{stats['relations']} relations, "
        f"{stats['edges']:,} edges, {stats['slices']} slices, {stats['pairs']:,} (relation, atom) pairs, "
        f"{stats['concept_relation_pairs']:,} (concept, relation) pairs, "
        f"{stats['distinct_rows']:,} distinct rows, "
        f"max multiplicity {stats['max_multiplicity']}; D = {args.dim}, float32, device {args.device}",
        "",
    ]
    rows = []
    plan = (
        [("(a) paper slice loop + autograd", "paper", args.baseline_reps, 1)]
        if baselines and "paper" not in args.skip
        else []
    )
    notes = []
    if baselines and "torchhd" not in args.skip:
        if importlib.util.find_spec("torchhd") is None:
            notes.append("(b) torchhd skipped: not installed (`pip install -e '.[bench]'`).")
        else:
            plan.append(("(b) torchhd bind + index_add", "torchhd", args.baseline_reps, 1))
    plan.append(("(c) ours: hrr_kernel.compose", "ours", args.reps, args.warmup))
    plan.append(
        ("(d) ours, spectral output (no irfft): compose_spectrum", "spectral", args.reps, args.warmup)
    )
    plan.append(
        (
            f"(e) ours, batch rows ({BATCH_LABEL}, Zipf): unique_ids + compose(rows) + gather_rows(inverse)",
            "batch_rows",
            args.reps,
            args.warmup,
        )
    )
    plan.append(
        (
            f"(e') ours, batch rows ({BATCH_LABEL}, Zipf), sparse atom gradient: compose(sparse_grad=True)",
            "batch_rows_sparse",
            args.reps,
            args.warmup,
        )
    )
    plan.append(
        (
            f"(e'') ours, batch rows ({BATCH_LABEL}, Zipf), sparse gradient, atoms as half spectra",
            "batch_rows_spectral",
            args.reps,
            args.warmup,
        )
    )
    if args.device == "cpu":  # the native kernels' baseline: the same batch rows on the torch path
        for key, tag in (("batch_rows_sparse", "(e')"), ("batch_rows_spectral", "(e'')")):
            plan.append((f"{tag} on the torch path (HRRBERT_NATIVE=0)", key, args.reps, args.warmup, False))
    plan.append(
        (
            "(f) ours, spectral inputs and output (no FFT at all): compose_spectrum(dim=D)",
            "spectral_atoms",
            args.reps,
            args.warmup,
        )
    )
    plan.append(("floor: rfft(atoms) + irfft(all N concepts) only", "fft_floor", args.reps, args.warmup))
    for label, method, reps, warmup, *native in plan:
        t0 = time.perf_counter()
        on = native[0] if native else True
        r = run_worker(
            root,
            method,
            args.dim,
            reps,
            warmup,
            args.timeout,
            args.device,
            native=on,
            allocator=args.allocator,
        )
        if "distinct_rows" in r:
            label += f", {r['distinct_rows']:,} distinct"
        if method.startswith("batch_rows") and on and r.get("native"):
            label += ", native kernels"
        r["label"], r["torch_path"] = label, not on
        print(
            f"  {label}: {json.dumps({k: v for k, v in r.items() if k not in ('counts', 'label')})} "
            f"[{time.perf_counter() - t0:.0f} s]",
            file=sys.stderr,
        )
        rows.append(r)
    ref = next((r for r in rows if r.get("method") == "paper" and "error" not in r), None)
    lines += table(rows, ref, args.device) + [""]
    if notes:
        lines += notes + [""]
    return lines, {"title": title, "program": str(root), "stats": stats, "rows": rows}


def goals(rows: list[dict], device: str, n_concepts: int) -> tuple[list[str], list[dict]]:
    """The issue's goals for this device, each with the measured value and met / not met."""
    kind = "cuda" if device.startswith("cuda") else "cpu"
    by_method = {r["method"]: r for r in rows if "error" not in r and not r.get("torch_path")}
    threads = next((r["threads"] for r in by_method.values()), None)
    where = f"{threads} CPU threads" if kind == "cpu" else device
    scale = (
        ""
        if n_concepts == PAPER_CONCEPTS
        else f"; {n_concepts:,} codes, not the paper scale they are stated for"
    )
    lines = [f"Goals (issue #15; main table, {where}{scale}):", ""]
    out = []
    for method, key, limit, unit, devices, what in GOALS:
        if kind not in devices:
            continue
        r = by_method.get(method)
        value = r.get(key) if r else None
        if value is None or value != value:
            verdict, shown = "not measured", "–"
        else:
            verdict = "met" if value <= limit else "not met"
            shown = f"{fmt(value, 2 if unit == 'ms' else 0)} {unit}"
        lines.append(f"- {what} <= {limit:g} {unit}: {shown} — {verdict}")
        out.append(
            {
                "goal": what,
                "method": method,
                "key": key,
                "limit": limit,
                "unit": unit,
                "value": value,
                "verdict": verdict,
            }
        )
    return lines + [""], out


def sweep(args) -> tuple[list[str], list[dict]]:
    points = QUICK_SWEEP if args.quick else tuple(n for n in SWEEP if n != 350_000 or not args.no_350k)
    nd = 3 if args.device.startswith("cuda") else 1
    lines = [
        "### Scale sweep of ours (synthetic, paper-shaped)",
        "",
        "| concepts | edges | pairs | forward (ms) | fwd+bwd (ms) | fwd ns/edge | fwd+bwd ns/edge | "
        f"{memory_label(args.device)} |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    rows = []
    for n in points:
        root = synthetic_program(n)
        r = run_worker(
            root,
            "ours",
            args.dim,
            args.reps,
            args.warmup,
            args.timeout,
            args.device,
            allocator=args.allocator,
        )
        r["concepts"] = n
        rows.append(r)
        print(f"  sweep {n}: {json.dumps({k: v for k, v in r.items() if k != 'counts'})}", file=sys.stderr)
        if "error" in r:
            lines.append(f"| {n:,} | {r['error']} | | | | | | |")
            continue
        e = r["counts"]["edges"]
        lines.append(
            f"| {n:,} | {e:,} | {r['counts']['pairs']:,} | {fmt(r['forward'], nd)} | "
            f"{fmt(r['forward_backward'], nd)} | "
            f"{fmt(1e6 * r['forward'] / e)} | {fmt(1e6 * r['forward_backward'] / e)} | "
            f"{fmt(r['peak_extra_mib'])} |"
        )
    return lines + [""], rows


def machine(device: str = "cpu") -> str:
    import torch

    cpu = "unknown CPU"
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    mem = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    return (
        f"{platform.node()}: {cpu}, {os.cpu_count()} CPUs, {mem:.0f} GiB, torch {torch.__version__}, "
        f"{torch.get_num_threads()} threads, Python {platform.python_version()}"
        + (
            f", {torch.cuda.get_device_name(device)} (CUDA {torch.version.cuda})"
            if device.startswith("cuda")
            else ""
        )
    )


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="small programs, few repetitions, no baselines (b)")
    ap.add_argument("--no-350k", action="store_true", help="skip the 350k-concept sweep point")
    ap.add_argument("--no-sweep", action="store_true", help="skip the scale sweep")
    ap.add_argument("--program", action="append", default=[], help="a compiled program folder (repeatable)")
    ap.add_argument("--dim", type=int, default=768)
    ap.add_argument("--reps", type=int, default=9, help="timed repetitions for ours")
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--baseline-reps", type=int, default=3, help="timed repetitions for (a) and (b)")
    ap.add_argument(
        "--skip", action="append", default=[], choices=["paper", "torchhd"], help="skip a baseline"
    )
    ap.add_argument(
        "--shared",
        type=float,
        default=0.5,
        help="also run ours on a program where this fraction of codes share an edge set (0: off)",
    )
    ap.add_argument("--timeout", type=float, default=1800)
    ap.add_argument("--threads", type=int, default=0)
    ap.add_argument("--device", default="cpu", help="cpu, or cuda (every method runs on the GPU)")
    ap.add_argument("--json", type=Path, default=None, help="also write every row (and the goals) as JSON")
    ap.add_argument(
        "--allocator",
        choices=list(ALLOCATORS),
        default="default",
        help="glibc in the workers: as it starts (default), or keeping freed memory as hrrbert does",
    )
    ap.add_argument("--worker", choices=WORKER_METHODS, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.worker:
        args.program = args.program[0]
        return worker(args)
    if args.device.startswith("cuda"):
        import torch

        if not torch.cuda.is_available():
            raise SystemExit(f"--device {args.device}: torch {torch.__version__} sees no CUDA device")
    if args.quick:
        args.reps, args.warmup, args.baseline_reps = 3, 1, 1
        args.skip = sorted(set(args.skip) | {"torchhd"})
    out = [
        f"## hrr_kernel benchmark — {machine(args.device)}",
        "",
        f"C allocator: {ALLOCATORS[args.allocator]}",
        "",
    ]
    n_main = 5_000 if args.quick else PAPER_CONCEPTS
    lines, main_section = compare(
        synthetic_program(n_main), f"Synthetic paper-scale program ({n_main:,} codes)", args, baselines=True
    )
    goal_lines, goal_rows = goals(main_section["rows"], args.device, n_main)
    out += lines + goal_lines
    sections = [main_section]
    if args.shared > 0:
        root = synthetic_program(n_main, shared=args.shared)
        lines, section = compare(
            root,
            f"Same shape, {args.shared:.0%} of codes sharing another code's edge set "
            "(ICD codes mapping to one SNOMED concept)",
            args,
            baselines=not args.quick,
        )
        out += lines
        sections.append(section)
    for p in args.program:
        lines, section = compare(Path(p), f"Compiled program {p}", args, baselines=True)
        out += lines
        sections.append(section)
    sweep_rows = []
    if not args.no_sweep:
        lines, sweep_rows = sweep(args)
        out += lines
    print("\n".join(out))
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        report = {
            "machine": machine(args.device),
            "device": args.device,
            "dim": args.dim,
            "allocator": args.allocator,
            "sections": sections,
            "goals": goal_rows,
            "sweep": sweep_rows,
        }
        args.json.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
