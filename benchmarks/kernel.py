"""Benchmark the HRR concept-matrix composer against the paper's method and torchhd.

Usage::

    python benchmarks/kernel.py                 # paper scale + scale sweep (5k, 25k, 100k, 350k)
    python benchmarks/kernel.py --quick         # small and fast (smoke run)
    python benchmarks/kernel.py --no-350k       # sweep without the 350k point
    python benchmarks/kernel.py --program artifacts/programs/<release>/<id>   # also a compiled program

Every number is measured in this run; each (program, method) runs in a fresh process so that peak
resident memory (VmHWM above the post-setup RSS) is attributable to it. Times are medians.
"""

from __future__ import annotations

import argparse
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
PAPER_CONCEPTS = 25_493  # hrr_kernel.synthetic.PAPER["n_concepts"]
SWEEP = (5_000, 25_000, 100_000, 350_000)
QUICK_SWEEP = (2_000, 5_000)


def synthetic_program(n_concepts: int, shared: float = 0.0, seed: int = 0) -> Path:
    """Write (once, cached) a paper-shaped synthetic program with ``n_concepts`` codes."""
    from hrr_kernel.synthetic import cached_paper_program

    return cached_paper_program(CACHE, n_concepts, shared=shared, seed=seed)


def run_worker(program: Path, method: str, dim: int, reps: int, warmup: int, timeout: float) -> dict:
    cmd = [sys.executable, __file__, "--worker", method, "--program", str(program), "--dim", str(dim)]
    cmd += ["--reps", str(reps), "--warmup", str(warmup)]
    try:
        res = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, check=False)
    except subprocess.TimeoutExpired:
        return {"method": method, "error": f"timed out after {timeout:.0f} s"}
    lines = [ln for ln in res.stdout.splitlines() if ln.startswith("{")]
    if res.returncode != 0 or not lines:
        tail = (res.stderr or res.stdout).strip().splitlines()[-1:] or ["no output"]
        return {"method": method, "error": f"exit {res.returncode}: {tail[0][:120]}"}
    return json.loads(lines[-1])


def worker(args: argparse.Namespace) -> None:
    import torch

    from benchmarks._kernel_methods import measure
    from hrr_kernel import load_program

    torch.set_num_threads(args.threads or torch.get_num_threads())
    program = load_program(args.program)
    result = measure(program, args.worker, args.dim, args.reps, args.warmup)
    result["counts"] = program.counts
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


def table(rows: list[dict], ref: dict | None) -> list[str]:
    out = [
        "| method | forward (ms) | fwd+bwd (ms) | bwd/fwd | peak extra (MiB) | fwd speed-up vs (a) | fwd+bwd speed-up vs (a) |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        if "error" in r:
            out.append(f"| {r['label']} | {r['error']} | | | | | |")
            continue
        f, fb = r["forward"], r["forward_backward"]
        ratio_f = ref["forward"] / f if ref and "forward" in ref else None
        ratio_fb = ref["forward_backward"] / fb if ref and "forward_backward" in ref else None
        out.append(
            f"| {r['label']} | {fmt(f, 1)} | {fmt(fb, 1)} | {fmt((fb - f) / f, 2)} | {fmt(r['peak_extra_mib'])} | "
            f"{fmt(ratio_f, 1) + 'x' if ratio_f else '–'} | {fmt(ratio_fb, 1) + 'x' if ratio_fb else '–'} |"
        )
    return out


def compare(root: Path, title: str, args, baselines: bool) -> list[str]:
    stats = program_stats(root)
    lines = [
        f"### {title}",
        "",
        f"program {root.name}: {stats['concepts']:,} concepts, {stats['atoms']:,} atoms, {stats['relations']} relations, "
        f"{stats['edges']:,} edges, {stats['slices']} slices, {stats['pairs']:,} (relation, atom) pairs, "
        f"{stats['concept_relation_pairs']:,} (concept, relation) pairs, {stats['distinct_rows']:,} distinct rows, "
        f"max multiplicity {stats['max_multiplicity']}; D = {args.dim}, float32",
        "",
    ]
    rows = []
    plan = (
        [("(a) paper slice loop + autograd", "paper", args.baseline_reps, 1)]
        if baselines and "paper" not in args.skip
        else []
    )
    if baselines and "torchhd" not in args.skip:
        plan.append(("(b) torchhd bind + index_add", "torchhd", args.baseline_reps, 1))
    plan.append(("(c) ours: hrr_kernel.compose", "ours", args.reps, args.warmup))
    plan.append(("floor: rfft(atoms) + irfft(all N concepts) only", "fft_floor", args.reps, args.warmup))
    for label, method, reps, warmup in plan:
        t0 = time.perf_counter()
        r = run_worker(root, method, args.dim, reps, warmup, args.timeout)
        r["label"] = label
        print(
            f"  {label}: {json.dumps({k: v for k, v in r.items() if k not in ('counts', 'label')})} "
            f"[{time.perf_counter() - t0:.0f} s]",
            file=sys.stderr,
        )
        rows.append(r)
    ref = next((r for r in rows if r.get("method") == "paper" and "error" not in r), None)
    return lines + table(rows, ref) + [""]


def sweep(args) -> list[str]:
    points = QUICK_SWEEP if args.quick else tuple(n for n in SWEEP if n != 350_000 or not args.no_350k)
    lines = [
        "### Scale sweep of ours (synthetic, paper-shaped)",
        "",
        "| concepts | edges | pairs | forward (ms) | fwd+bwd (ms) | fwd ns/edge | fwd+bwd ns/edge | peak extra (MiB) |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for n in points:
        root = synthetic_program(n)
        r = run_worker(root, "ours", args.dim, args.reps, args.warmup, args.timeout)
        print(f"  sweep {n}: {json.dumps({k: v for k, v in r.items() if k != 'counts'})}", file=sys.stderr)
        if "error" in r:
            lines.append(f"| {n:,} | {r['error']} | | | | | | |")
            continue
        e = r["counts"]["edges"]
        lines.append(
            f"| {n:,} | {e:,} | {r['counts']['pairs']:,} | {fmt(r['forward'], 1)} | {fmt(r['forward_backward'], 1)} | "
            f"{fmt(1e6 * r['forward'] / e)} | {fmt(1e6 * r['forward_backward'] / e)} | {fmt(r['peak_extra_mib'])} |"
        )
    return lines + [""]


def machine() -> str:
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
    ap.add_argument("--worker", choices=["paper", "torchhd", "ours", "fft_floor"], help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.worker:
        args.program = args.program[0]
        return worker(args)
    if args.quick:
        args.reps, args.warmup, args.baseline_reps = 3, 1, 1
        args.skip = sorted(set(args.skip) | {"torchhd"})
    out = [f"## hrr_kernel benchmark — {machine()}", ""]
    n_main = 5_000 if args.quick else PAPER_CONCEPTS
    out += compare(
        synthetic_program(n_main), f"Synthetic paper-scale program ({n_main:,} codes)", args, baselines=True
    )
    if args.shared > 0:
        root = synthetic_program(n_main, shared=args.shared)
        out += compare(
            root,
            f"Same shape, {args.shared:.0%} of codes sharing another code's edge set (ICD codes mapping to one SNOMED concept)",
            args,
            baselines=not args.quick,
        )
    for p in args.program:
        out += compare(Path(p), f"Compiled program {p}", args, baselines=True)
    if not args.no_sweep:
        out += sweep(args)
    print("\n".join(out))


if __name__ == "__main__":
    main()
