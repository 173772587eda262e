"""Run an experiment's independent (configuration, seed) runs side by side in worker processes.

Each run (pretrain, fine-tune, evaluate one configuration at one seed) only reads the dataset and the
program and writes its own folders, so runs share nothing but the CPU. On a small CPU-only machine two
one-thread workers finish a two-configuration experiment in about half the time of one process with two
threads (the tiny models gain little from a second intra-op thread). Workers are spawned (never forked:
torch's thread pools do not survive a fork), log at the parent's level, and use ``threads`` torch threads
each. An error in a worker is raised in the parent once every started run has stopped.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from multiprocessing import get_context
from typing import Any

log = logging.getLogger(__name__)


def _init_worker(level: int, threads: int) -> None:
    from ontology_compiler.api import DATE_FORMAT, FORMAT

    logging.basicConfig(level=level, format=FORMAT, datefmt=DATE_FORMAT, force=True)
    import torch

    torch.set_num_threads(max(1, threads))


def run_parallel(
    fn: Callable[..., Any],
    jobs: Sequence[tuple],
    *,
    workers: int,
    threads: int = 1,
    done: Callable[[int, Any], None] | None = None,
) -> list[Any]:
    """``[fn(*job) for job in jobs]``, computed by ``workers`` spawned processes (``workers <= 1``: here,
    in order). ``fn`` must be a module-level function; ``done(index, result)`` is called in the parent as
    each job finishes. Results come back in the order of ``jobs``."""
    results: list[Any] = [None] * len(jobs)
    if workers <= 1 or len(jobs) <= 1:
        for i, job in enumerate(jobs):
            results[i] = fn(*job)
            if done:
                done(i, results[i])
        return results
    level = logging.getLogger().getEffectiveLevel()
    errors: list[BaseException] = []
    with ProcessPoolExecutor(
        max_workers=min(workers, len(jobs)),
        mp_context=get_context("spawn"),
        initializer=_init_worker,
        initargs=(level, threads),
    ) as pool:
        futures = {pool.submit(fn, *job): i for i, job in enumerate(jobs)}
        for fut in as_completed(futures):
            i = futures[fut]
            try:
                results[i] = fut.result()
            except BaseException as e:  # noqa: BLE001 (re-raised below, after the other runs stopped)
                log.error("run %d of %d failed: %s", i + 1, len(jobs), e)
                errors.append(e)
                for f in futures:
                    f.cancel()
                continue
            if done:
                done(i, results[i])
    if errors:
        raise errors[0]
    return results
