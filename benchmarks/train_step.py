"""Benchmark one HRRBERT pretraining step per model preset and embedding mode.

For each (preset, mode) it measures, on a synthetic paper-scale program (25,493 codes, 22,725 atoms,
42 relations; written once with ``tests/helpers/synthetic_program.py`` and cached under
``benchmarks/_cache/``):

* step time: masked-code forward (full matrix built once, used for lookup and the tied decoder),
  backward, gradient clipping and the AdamW update, on random sequences of 128 codes with 15 % masked;
* tokens per second (batch x 128 / step time);
* the embedding-matrix share: the time to build the matrix and back-propagate through it
  (``token_matrix()`` + ``backward``), measured separately, divided by the step time;
* ratios against the ``unstructured`` baseline of the same preset, measured in the same run;
* every HRR mode twice: the tied decoder on the signal-domain matrix (``decoder`` ``matrix``) and in the
  spectral domain (``spectral``: ``HRRBertSettings.spectral_decoder``, inputs composed for the batch's
  rows only, no full-matrix ``irfft``; same logits up to float rounding), and a third time with the atoms and
  relations trained as half spectra as well (``spectral-atoms``: ``HRRBertSettings.spectral_atoms``; no
  ``rfft`` of the atoms either, only the sparse product is left of the composition).

Goal (issue 6): the matrix share at most 15 % for BERT-base at paper scale on the 2-core CPU.

``--vocab-sizes N ...`` measures instead the real pretraining step (``pipelines.train.mlm.mlm_step``: masking,
forward, loss, backward, clipping, AdamW) of one preset and mode on synthetic programs of those sizes, with
the full softmax and with the sampled one (``--mlm-softmax sampled``: the batch's targets plus
``--negatives`` drawn, only their rows composed, the atoms' and table's gradients sparse and updated by
``LazyAdamW``, as ``pretrain`` runs it), each (size, softmax) in a fresh process so that its peak
RSS is its own; ratios against the smallest size's sampled step. Goal (issue 32): the 350k sampled step
within 1.5x of the 25k one.

Times are medians. The default run takes a few minutes on 2 cores::

    python benchmarks/train_step.py                          # tiny, small, bert-base x 5 modes
    python benchmarks/train_step.py --presets bert-base --batch bert-base=16 --steps 5
    python benchmarks/train_step.py --device cuda --bf16 --batch bert-base=256   # on a GPU
    python benchmarks/train_step.py --vocab-sizes 25493 100000 350000            # the sampled softmax
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

from hrr_kernel import MODES as MODE_SPECS  # noqa: E402

CACHE = ROOT / "benchmarks" / "_cache"
PAPER_CONCEPTS = 25_493  # tests.helpers.synthetic_program.PAPER["n_concepts"]
MODES = tuple(MODE_SPECS)
DECODERS = ("matrix", "spectral", "spectral-atoms")
PRESETS = ("tiny", "small", "bert-base")
DEFAULT_BATCH = {"tiny": 32, "small": 16, "bert-base": 4}
DEFAULT_STEPS = {"tiny": 5, "small": 4, "bert-base": 3}
SEQ = 128  # codes per sequence, [CLS] included (the paper's max_len)
N_SPECIAL = 5  # concept ids 0..4 are the program's special tokens ([PAD], [CLS], [SEP], [MASK], [UNK])
CLS_ID = 1
CODES_PER_VISIT = 8  # synthetic visit segments: every 8 codes start a new visit
LAST_SEGMENT = 99  # the last visit-segment embedding (HRRBertSettings.max_segments - 1)
MASK_PROB = 0.15  # BERT's share of masked codes


def synthetic_program(n_concepts: int, seed: int = 0) -> Path:
    """A paper-shaped synthetic program (cached; the same one ``benchmarks/kernel.py`` uses)."""
    from tests.helpers.synthetic_program import cached_paper_program

    return cached_paper_program(CACHE, n_concepts, seed=seed)


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize()


def make_batch(n_concepts: int, batch: int, g: torch.Generator, device: torch.device):
    """Random MLM batch: ``(ids, segments, attention, mlm_mask, targets)``, [CLS] first and never masked."""
    ids = torch.randint(N_SPECIAL, n_concepts, (batch, SEQ), generator=g)
    ids[:, 0] = CLS_ID
    seg = torch.arange(SEQ).div(CODES_PER_VISIT, rounding_mode="floor").clamp(max=LAST_SEGMENT)
    seg = seg.expand(batch, SEQ).contiguous()
    mask = torch.rand(batch, SEQ, generator=g) < MASK_PROB
    mask[:, 0] = False
    att = torch.ones(batch, SEQ, dtype=torch.bool)
    return ids.to(device), seg.to(device), att.to(device), mask.to(device), ids[mask.cpu()].to(device)


def median_seconds(fn, warmup: int, steps: int, device: torch.device) -> float:
    """Median wall time of ``steps`` calls of ``fn`` after ``warmup`` untimed ones (device-synchronised)."""
    times = []
    for i in range(warmup + steps):
        sync(device)
        t = time.perf_counter()
        fn()
        sync(device)
        if i >= warmup:
            times.append(time.perf_counter() - t)
    return statistics.median(times)


def bench_one(
    program,
    preset: str,
    mode: str,
    batch: int,
    steps: int,
    warmup: int,
    device,
    bf16: bool,
    decoder: str = "matrix",
) -> dict:
    from model import HRRBert
    from model import preset as make_preset

    torch.manual_seed(0)
    logf = torch.linspace(-14, 0, program.n_concepts) if MODE_SPECS[mode].frequency else None
    cfg = make_preset(
        preset, mode=mode, spectral_decoder=decoder != "matrix", spectral_atoms=decoder == "spectral-atoms"
    )
    model = HRRBert(cfg, program, log_frequency=logf).train()
    model.heads.requires_grad_(False)
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=1e-4)
    g = torch.Generator().manual_seed(0)
    ids, seg, att, mask, targets = make_batch(program.n_concepts, batch, g, device)

    def step() -> None:
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=bf16 and device.type == "cuda"):
            logits = model(ids, seg, att, mlm_mask=mask)
        loss = F.cross_entropy(logits.float(), targets)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()

    def build() -> None:
        e = model.token_matrix()
        if e.requires_grad:
            e.backward(torch.ones_like(e))

    step_s = median_seconds(step, warmup, steps, device)
    build_s = median_seconds(build, warmup, steps, device)
    opt.zero_grad(set_to_none=True)
    return {
        "preset": preset,
        "mode": mode,
        "decoder": decoder,
        "batch": batch,
        "step_ms": 1000 * step_s,
        "tokens_per_s": batch * SEQ / step_s,
        "seq_per_s": batch / step_s,
        "embed_ms": 1000 * build_s,
        "embed_share": build_s / step_s,
        "params_m": model.num_parameters() / 1e6,
    }


def bench_vocab_step(
    n_concepts: int,
    softmax: str,
    preset: str,
    mode: str,
    batch: int,
    steps: int,
    warmup: int,
    negatives: int,
    allocator: str = "default",
) -> dict:
    """One (vocabulary size, softmax, allocator) point of ``--vocab-sizes``, run in its own process: the
    pretraining step as ``pretrain`` runs it, on random sequences whose codes follow a Zipf law (so that
    the proposal has a frequency to smooth); ``allocator`` ``keep``: what the ``hrrbert`` command does
    first (:func:`pipelines.cli.allocator.keep_freed_memory`)."""
    import resource

    if allocator == "keep":
        from pipelines.cli.allocator import keep_freed_memory

        if keep_freed_memory() != "keep":
            raise SystemExit("could not keep freed memory (HRRBERT_MALLOC, MALLOC_* set, or no glibc)")
    from types import SimpleNamespace

    from hrr_kernel import load_program
    from model import HRRBert
    from model import preset as make_preset
    from pipelines.train.mlm import Tokens, mlm_step, sampler_of
    from pipelines.train.sparse import adamw_for, clip_grad_norm

    device = torch.device("cpu")
    t = time.perf_counter()
    program = load_program(synthetic_program(n_concepts), device=device)
    load_s = time.perf_counter() - t
    torch.manual_seed(0)
    model = HRRBert(make_preset(preset, mode=mode), program).train()
    model.heads.requires_grad_(False)
    params = [p for p in model.parameters() if p.requires_grad]
    # as pretrain does: the sampled softmax trains sparse atom and table gradients with LazyAdamW
    opt = adamw_for(model, params, sparse=softmax == "sampled", lr=1e-4)
    g = torch.Generator().manual_seed(0)
    rank = torch.arange(1, n_concepts - N_SPECIAL + 1, dtype=torch.float64)
    zipf = rank.reciprocal()  # (N - S,): code k drawn with probability proportional to 1 / k
    ids = N_SPECIAL + torch.multinomial(zipf, batch * SEQ, replacement=True, generator=g).view(batch, SEQ)
    ids[:, 0] = CLS_ID
    seg = torch.arange(SEQ).div(CODES_PER_VISIT, rounding_mode="floor").clamp(max=LAST_SEGMENT)
    b = {"input_ids": ids, "segment_ids": seg.expand(batch, SEQ).contiguous(),
         "attention_mask": torch.ones(batch, SEQ, dtype=torch.bool)}  # fmt: skip
    # the synthetic program's first N_SPECIAL concepts stand for the special tokens ([MASK] the fourth)
    tok = Tokens(3, torch.arange(N_SPECIAL), torch.arange(N_SPECIAL, n_concepts))
    if softmax == "sampled":
        tok.sampler = sampler_of(tok, SimpleNamespace(**b), n_concepts, negatives)
    cfg, ctx = SimpleNamespace(seed=0, mask_prob=MASK_PROB), SimpleNamespace(rank=0)
    counter = iter(range(10**9))

    def step() -> None:
        out = mlm_step(model, b, tok, cfg, next(counter), ctx, device)
        opt.zero_grad(set_to_none=True)
        out.loss.backward()
        clip_grad_norm(params, 1.0)
        opt.step()

    step_s = median_seconds(step, warmup, steps, device)
    return {
        "concepts": n_concepts,
        "softmax": softmax,
        "preset": preset,
        "mode": mode,
        "batch": batch,
        "negatives": negatives if softmax == "sampled" else None,
        "step_ms": 1000 * step_s,
        "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "load_s": load_s,
    }


def vocab_table(rows: list[dict]) -> str:
    """Ratios within one allocator setting: against its smallest sampled point and its full softmax of the
    same size; with two settings, ``keep`` against ``default`` for the same point."""
    out = [
        "| concepts | softmax | allocator | step (ms) | peak RSS (MB) | vs smallest sampled | "
        "vs full, same size | keep vs default |",
        "|---|---|---|---|---|---|---|---|",
    ]
    key = {(r["concepts"], r["softmax"], r.get("allocator", "default")): r for r in rows}
    for r in rows:
        alloc = r.get("allocator", "default")
        sampled = [x for x in rows if x["softmax"] == "sampled" and x.get("allocator", "default") == alloc]
        first = min(sampled, key=lambda x: x["concepts"], default=None)
        vs_first = f"{r['step_ms'] / first['step_ms']:.2f}x" if first else "-"
        f = key.get((r["concepts"], "full", alloc))
        vs_full = f"{r['step_ms'] / f['step_ms']:.2f}x" if f else "-"
        d = key.get((r["concepts"], r["softmax"], "default"))
        vs_default = f"{r['step_ms'] / d['step_ms']:.2f}x" if d and alloc == "keep" else "-"
        out.append(
            f"| {r['concepts']:,} | {r['softmax']} | {alloc} | {r['step_ms']:.0f} | "
            f"{r['peak_rss_mb']:,.0f} | {vs_first} | {vs_full} | {vs_default} |"
        )
    return "\n".join(out)


def run_vocab_sizes(a) -> int:
    """``--vocab-sizes``: each (size, softmax) point in a child process of this script."""
    import subprocess

    preset, mode = a.presets[0], a.modes[0] if a.modes != list(MODES) else "base"
    batch = parse_map(a.batch, DEFAULT_BATCH)[preset]
    steps = a.steps or DEFAULT_STEPS[preset]
    print(
        f"vocabulary sweep: preset {preset}, mode {mode}, batch {batch} x {SEQ}, {steps} timed steps, "
        f"{a.negatives} negatives; torch {torch.__version__}, {platform.processor() or platform.machine()}",
        flush=True,
    )
    rows = []
    t0 = time.perf_counter()
    for n in a.vocab_sizes:
        synthetic_program(n)  # generated (and cached) outside the timed children
        for softmax in a.softmaxes:
            for allocator in a.allocators:
                child = [sys.executable, __file__, "--vocab-child", json.dumps(
                    [n, softmax, preset, mode, batch, steps, a.warmup, a.negatives, allocator])]  # fmt: skip
                res = subprocess.run(child, capture_output=True, text=True, check=False)
                if res.returncode != 0:
                    raise SystemExit(f"{n} concepts, {softmax}: the child failed\n{res.stderr[-3000:]}")
                r = {**json.loads(res.stdout.strip().splitlines()[-1]), "allocator": allocator}
                rows.append(r)
                print(
                    f"  {n:>8,} {softmax:8s} {allocator:8s} step {r['step_ms']:8.0f} ms  "
                    f"peak {r['peak_rss_mb']:8,.0f} MB",
                    flush=True,
                )
    return report(vocab_table(rows), rows, t0, a.json)


def report(text: str, rows: list[dict], t0: float, json_path: Path | None) -> int:
    """Print a run's table and wall time; write its rows as JSON when asked."""
    print(f"\n{text}\n\nwall time {time.perf_counter() - t0:.0f} s")
    if json_path:
        json_path.write_text(json.dumps(rows, indent=2))
    return 0


def table(rows: list[dict]) -> str:
    head = (
        "| preset | mode | decoder | batch | params (M) | step (ms) | tokens/s | seq/s | "
        "matrix build+bwd (ms) | matrix share | step vs unstructured | tokens/s vs unstructured |"
    )
    out = [head, "|" + "---|" * 12]
    base = {r["preset"]: r for r in rows if r["mode"] == "unstructured"}
    for r in rows:
        b = base.get(r["preset"])
        ratio = f"{r['step_ms'] / b['step_ms']:.2f}x" if b else "-"
        tratio = f"{r['tokens_per_s'] / b['tokens_per_s']:.2f}x" if b else "-"
        out.append(
            f"| {r['preset']} | {r['mode']} | {r.get('decoder', 'matrix')} | {r['batch']} | "
            f"{r['params_m']:.1f} | {r['step_ms']:.0f} | "
            f"{r['tokens_per_s']:.0f} | {r['seq_per_s']:.1f} | {r['embed_ms']:.1f} | "
            f"{100 * r['embed_share']:.1f} % | "
            f"{ratio} | {tratio} |"
        )
    return "\n".join(out)


def parse_map(items: list[str], default: dict[str, int]) -> dict[str, int]:
    out = dict(default)
    for it in items:
        k, _, v = it.partition("=")
        if k not in default or not v.isdigit():
            raise SystemExit(f"expected PRESET=INT with PRESET in {sorted(default)}, got {it!r}")
        out[k] = int(v)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--presets", nargs="+", default=list(PRESETS), choices=PRESETS)
    ap.add_argument("--modes", nargs="+", default=list(MODES), choices=MODES)
    ap.add_argument(
        "--batch", nargs="*", default=[], help="PRESET=N overrides (default tiny=32 small=16 bert-base=4)"
    )
    ap.add_argument(
        "--steps", type=int, default=None, help="timed steps per config (default tiny 5, small 4, base 3)"
    )
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--concepts", type=int, default=PAPER_CONCEPTS, help="program size (paper: 25,493)")
    ap.add_argument(
        "--program", type=Path, default=None, help="a compiled program instead of the synthetic one"
    )
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--bf16", action="store_true", help="bf16 autocast (CUDA)")
    ap.add_argument("--json", type=Path, default=None, help="also write the rows as JSON")
    ap.add_argument(
        "--decoders",
        nargs="+",
        default=list(DECODERS),
        choices=DECODERS,
        help="tied decoder of the HRR modes: on the signal-domain matrix, in the spectral domain, and in "
        "the spectral domain with the atoms and relations trained as half spectra",
    )
    ap.add_argument(
        "--vocab-sizes",
        nargs="+",
        type=int,
        default=None,
        help="instead: the pretraining step on synthetic programs of these sizes, full and sampled softmax "
        "(first --presets, base unless --modes names one)",
    )
    ap.add_argument("--softmaxes", nargs="+", default=["full", "sampled"], choices=["full", "sampled"])
    ap.add_argument("--negatives", type=int, default=8192, help="--vocab-sizes: sampled softmax negatives")
    ap.add_argument(
        "--allocators",
        nargs="+",
        default=["default"],
        choices=["default", "keep"],
        help="--vocab-sizes: glibc as it is, and/or keeping freed memory in the process as the hrrbert "
        "command does (keep: pipelines.cli.allocator.keep_freed_memory)",
    )
    ap.add_argument("--vocab-child", default=None, help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.vocab_child is not None:
        print(json.dumps(bench_vocab_step(*json.loads(a.vocab_child))))
        return 0
    if a.vocab_sizes:
        return run_vocab_sizes(a)

    from hrr_kernel import load_program

    device = torch.device(a.device)
    path = a.program or synthetic_program(a.concepts)
    program = load_program(path, device=device)
    batch = parse_map(a.batch, DEFAULT_BATCH)
    print(
        f"program {path.name}: {program.n_concepts} concepts, {program.n_atoms} atoms, "
        f"{program.n_relations} relations, "
        f"{program.n_edges} edges; device {device}, torch {torch.__version__}, "
        f"{torch.get_num_threads()} threads, "
        f"{platform.processor() or platform.machine()}",
        flush=True,
    )
    rows = []
    t0 = time.perf_counter()
    modes = ["unstructured"] + [m for m in a.modes if m != "unstructured"]
    for p in a.presets:
        steps = a.steps or DEFAULT_STEPS[p]
        for m in modes:
            for dec in a.decoders if MODE_SPECS[m].composes else ["matrix"]:  # no spectrum to decode
                r = bench_one(program, p, m, batch[p], steps, a.warmup, device, a.bf16, dec)
                rows.append(r)
                print(
                    f"  {p:9s} {m:12s} {dec:8s} step {r['step_ms']:8.0f} ms  "
                    f"matrix {100 * r['embed_share']:5.1f} %",
                    flush=True,
                )
    return report(table(rows), rows, t0, a.json)


if __name__ == "__main__":
    sys.exit(main())
