"""Pipelines: data, training, evaluation, and the ``hrrbert`` command.

The public API is imported lazily (``from pipelines import prepare``) so that ``hrrbert --help`` stays
instant and importing one part does not pull in the others.
"""

from __future__ import annotations

import importlib

_API = {
    "build_demo_release": "pipelines.demo.release",
    "generate_cohort": "pipelines.demo.cohort",
    "read_mimic": "pipelines.data.readers.mimic",
    "read_eicu": "pipelines.data.readers.eicu",
    "read_meds": "pipelines.data.readers.meds",
    "tokenize": "pipelines.data.tokenize",
    "prepare": "pipelines.data.prepare",
    "verify_dataset": "pipelines.data.dataset",
    "PipelineError": "pipelines.errors",
    "pretrain": "pipelines.train.pretrain",
    "finetune": "pipelines.train.finetune",
    "evaluate": "pipelines.eval.pretrained",
    "report": "pipelines.eval.report",
    "run_experiment": "pipelines.eval.experiment",
    "generate_doctor2vec": "pipelines.doctor2vec.data",
    "read_doctor2vec": "pipelines.doctor2vec.read",
    "train_doctor2vec": "pipelines.doctor2vec.train",
    "evaluate_doctor2vec": "pipelines.doctor2vec.evaluate",
}

__all__ = sorted(_API)


def __getattr__(name: str):
    if name in _API:
        return getattr(importlib.import_module(_API[name]), name)
    raise AttributeError(f"module 'pipelines' has no attribute {name!r}")
