"""Pipelines: data, training, evaluation, and the ``hrrbert`` command.

The public API is imported lazily (``from pipelines import prepare``) so that ``hrrbert --help`` stays
instant and importing one part does not pull in the others.
"""

from __future__ import annotations

import importlib

_API = {
    "build_demo_release": "pipelines.demo_release",
    "generate_cohort": "pipelines.cohort",
    "read_mimic": "pipelines.readers_mimic",
    "read_eicu": "pipelines.readers_eicu",
    "read_meds": "pipelines.readers_meds",
    "tokenize": "pipelines.tokenize",
    "prepare": "pipelines.prepare",
    "verify_dataset": "pipelines.dataset",
    "PipelineError": "pipelines.errors",
    "pretrain": "pipelines.train",
    "finetune": "pipelines.finetune",
    "evaluate": "pipelines.evaluate",
    "report": "pipelines.report",
    "run_experiment": "pipelines.experiment",
    "generate_doctor2vec": "pipelines.doctor2vec_data",
    "read_doctor2vec": "pipelines.doctor2vec_read",
    "train_doctor2vec": "pipelines.doctor2vec",
    "evaluate_doctor2vec": "pipelines.doctor2vec_eval",
}

__all__ = sorted(_API)


def __getattr__(name: str):
    if name in _API:
        return getattr(importlib.import_module(_API[name]), name)
    raise AttributeError(f"module 'pipelines' has no attribute {name!r}")
