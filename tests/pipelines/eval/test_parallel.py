"""Experiment runs in worker processes: results in job order, errors raised in the parent."""

from __future__ import annotations

import math
import operator

import pytest

from pipelines.eval.parallel import run_parallel


def test_results_come_back_in_job_order_from_two_workers():
    seen = []
    out = run_parallel(
        operator.add, [(1, 2), (3, 4), (5, 6)], workers=2, done=lambda i, r: seen.append((i, r))
    )
    assert out == [3, 7, 11]
    assert sorted(seen) == [(0, 3), (1, 7), (2, 11)]


def test_one_worker_runs_here_in_order():
    seen = []
    assert run_parallel(operator.mul, [(2, 3), (4, 5)], workers=1, done=lambda i, r: seen.append(i)) == [
        6,
        20,
    ]
    assert seen == [0, 1]


def test_an_error_in_a_worker_is_raised_in_the_parent():
    with pytest.raises(ValueError, match="math domain error"):
        run_parallel(math.sqrt, [(4.0,), (-1.0,)], workers=2)
