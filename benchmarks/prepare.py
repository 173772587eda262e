"""Benchmark: a 190k-patient MIMIC-IV-layout cohort read, labelled and tokenized (goal: <= 60 s, <= 4 GB).

    python benchmarks/prepare.py                 # 190k patients, cohort cached under artifacts/bench/
    python benchmarks/prepare.py --patients 20000

The program is the demo program (``pipelines.demo.release`` default size, compiled once) when the
builder exists, else one compiled from ``benchmarks/synthetic_release.py --scale 0.05``. Each phase runs
in a fresh subprocess so that its peak RSS (``ru_maxrss``) is its own. The baseline is plain Python
``csv`` + ``gzip`` reading ``diagnoses_icd.csv.gz`` into lists, measured in the same run.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

_REPO = Path(__file__).resolve().parents[1]
if str(_REPO) not in sys.path:
    sys.path.insert(0, str(_REPO))


def _program(cache: Path) -> Path:
    from ontology_compiler import compile_ontology

    if importlib.util.find_spec("pipelines.demo.release") is not None:
        from pipelines.demo.prepare import ensure_demo_release

        release = ensure_demo_release(cache / "releases" / "demo_icd10cm_default", size="default", seed=0)
    else:
        release = cache / "releases" / "synthetic_s005"
        if not release.exists():
            subprocess.run(
                [
                    sys.executable,
                    str(_REPO / "benchmarks" / "synthetic_release.py"),
                    "--out",
                    str(release),
                    "--scale",
                    "0.05",
                ],
                check=True,
            )
    return compile_ontology(release, out=cache / "programs").path


def _phase(name: str, cohort: Path, program: Path, n: int) -> dict:
    """Run one phase in this process; returns seconds, rows and peak RSS."""
    t0 = time.perf_counter()
    if name == "generate":
        from pipelines.demo.cohort import generate_cohort

        generate_cohort(cohort, n_patients=n, seed=0, codes=program)
        rows = sum(1 for _ in _gz_lines(cohort / "hosp" / "diagnoses_icd.csv.gz")) - 1
    elif name == "baseline csv+gzip":
        import csv
        import gzip

        with gzip.open(cohort / "hosp" / "diagnoses_icd.csv.gz", "rt", newline="") as f:
            data = [
                (int(r[0]), int(r[1]), int(r[2]), r[3], int(r[4]))
                for r in csv.reader(f)
                if r[0] != "subject_id"
            ]
        rows = len(data)
    elif name == "read + label":
        from pipelines.data.readers.mimic import read_mimic

        rows = read_mimic(cohort).events.num_rows
    elif name == "prepare (read, label, tokenize, split, write)":
        from pipelines.data.prepare import prepare_source

        with tempfile.TemporaryDirectory() as tmp:
            r = prepare_source("mimic-iv", cohort, program, out=tmp)
            rows = r.manifest["counts"]["codes"]["code_rows"]
            (Path(tempfile.gettempdir()) / "bench_prepare_manifest.json").write_text(
                json.dumps(r.manifest["counts"])
            )
    else:
        raise ValueError(name)
    seconds = time.perf_counter() - t0
    return {
        "phase": name,
        "seconds": seconds,
        "rows": rows,
        "rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
    }


def _gz_lines(path: Path):
    import gzip

    with gzip.open(path, "rt") as f:
        yield from f


def _run_child(name: str, cohort: Path, program: Path, n: int) -> dict:
    out = subprocess.run(
        [
            sys.executable,
            __file__,
            "--child",
            name,
            "--cohort",
            str(cohort),
            "--program",
            str(program),
            "--patients",
            str(n),
        ],
        check=True,
        capture_output=True,
        text=True,
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--patients", type=int, default=190_000)
    ap.add_argument("--cache", type=Path, default=_REPO / "artifacts" / "bench")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    ap.add_argument("--cohort", type=Path, help=argparse.SUPPRESS)
    ap.add_argument("--program", type=Path, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        print(json.dumps(_phase(args.child, args.cohort, args.program, args.patients)))
        return
    program = _program(args.cache)
    cohort = args.cache / "ehr" / f"cohort-{args.patients}-s0-{program.name}"
    results = []
    if not (cohort / "ground_truth" / "README.json").is_file():
        results.append(_run_child("generate", cohort, program, args.patients))
    for name in ("baseline csv+gzip", "read + label", "prepare (read, label, tokenize, split, write)"):
        results.append(_run_child(name, cohort, program, args.patients))
    print(f"program {program}\ncohort  {cohort} ({args.patients} patients)\n")
    print(f"| {'phase':<46} | {'seconds':>8} | {'rows':>10} | {'rows/s':>10} | {'peak RSS MB':>11} |")
    print(f"|{'-' * 48}|{'-' * 10}:|{'-' * 12}:|{'-' * 12}:|{'-' * 13}:|")
    for r in results:
        print(
            f"| {r['phase']:<46} | {r['seconds']:8.1f} | {r['rows']:10d} | "
            f"{r['rows'] / r['seconds']:10.0f} | {r['rss_mb']:11.0f} |"
        )
    counts = json.loads((Path(tempfile.gettempdir()) / "bench_prepare_manifest.json").read_text())
    p, c = counts["patients"], counts["codes"]
    print(f"\npatients kept {p['kept']} (dropped {p['dropped']}), splits {p['by_split']}")
    print(
        f"unknown code share {100 * c['unknown_code_share']:.2f} %, "
        f"log frequency {c['log_frequency_min']:.2f} to "
        f"{c['log_frequency_max']:.2f}, "
        f"{c['concepts_seen_in_pretraining']} of {c['program_concepts']} concepts seen"
    )


if __name__ == "__main__":
    main()
