"""Pipelines: data, training, evaluation, and the ``hrrbert`` command.

The rooms (see docs/architecture.md): ``data`` (readers, tokenization, splits, the dataset format),
``train`` (the one training loop, pretraining, fine-tuning, checkpoints, runtime), ``eval``
(evaluations, statistics, report, the experiment protocol), ``demo``, ``qa``, ``doctor2vec`` and
``cli``. Imports run data <- train <- eval <- {demo, qa, doctor2vec} <- cli.

The public API is imported lazily (``from pipelines import prepare``) so that ``hrrbert --help`` stays
instant and importing one part does not pull in the others.
"""

from __future__ import annotations

import importlib

from pipelines.data.readers import READERS  # light: the registry only

_API = {
    "build_demo_release": "pipelines.demo.release",
    "generate_cohort": "pipelines.demo.cohort",
    # each reader's read function: read_mimic, read_eicu, read_meds, ...
    **{r.read: f"pipelines.data.readers.{r.module}" for r in READERS.values()},
    "tokenize": "pipelines.data.tokenize",
    "prepare": "pipelines.data.prepare",
    "prepare_demo": "pipelines.demo.prepare",
    "verify_dataset": "pipelines.data.dataset",
    "PipelineError": "pipelines.errors",
    "pretrain": "pipelines.train.pretrain",
    "finetune": "pipelines.train.finetune",
    "run_loop": "pipelines.train.loop",
    "evaluate": "pipelines.eval.pretrained:evaluate_pretrained",  # the pretrained model's evaluations
    "evaluate_pretrained": "pipelines.eval.pretrained",
    "report": "pipelines.eval.report",
    "run_experiment": "pipelines.eval.experiment",
    "generate_qa": "pipelines.qa.data",
    "train_qa": "pipelines.qa.train",
    "evaluate_qa": "pipelines.qa.train",
    "generate_doctor2vec": "pipelines.doctor2vec.data",
    "read_doctor2vec": "pipelines.doctor2vec.read",
    "train_doctor2vec": "pipelines.doctor2vec.train",
    "evaluate_doctor2vec": "pipelines.doctor2vec.evaluate",
}

__all__ = sorted(_API)


def __getattr__(name: str):
    if name in _API:
        module, _, attr = _API[name].partition(":")
        return getattr(importlib.import_module(module), attr or name)
    raise AttributeError(f"module 'pipelines' has no attribute {name!r}")
