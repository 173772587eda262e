"""The fine-tuning tasks and the dataset label each one reads (light: the CLI lists them in ``--help``)."""

from __future__ import annotations

# task -> (label column of patients.parquet, number of labels); chapters are ICD-10 chapters 1..22
TASK_LABELS: dict[str, tuple[str, int]] = {"mortality": ("mortality_6m", 1), "chapters": ("chapters", 22)}
TASKS: tuple[str, ...] = tuple(TASK_LABELS)
