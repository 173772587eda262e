"""Helpers the tests and ``benchmarks/*.py`` share (not shipped): ``synthetic_program`` writes synthetic
programs in the documented format. Import them as ``tests.helpers.<module>`` (the repository root is on
the path: pytest's ``pythonpath``, and each benchmark puts it there)."""
