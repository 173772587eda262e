"""Pipelines: data, training, evaluation, and the ``hrrbert`` command."""

__all__: list[str] = []
