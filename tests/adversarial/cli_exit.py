"""The adversarial CLI tests' one check of a refused command: the exit code, one clear error, no traceback."""

from __future__ import annotations


def clean_exit(res, code: int, *needles: str) -> str:
    """``res`` (a click ``Result``) exited with ``code`` through ``SystemExit``, printing an error holding
    every one of ``needles`` and no traceback; returns its output."""
    assert res.exit_code == code, (res.exit_code, res.output, res.exception)
    assert isinstance(res.exception, SystemExit), res.exception
    assert "Error" in res.output and "Traceback" not in res.output, res.output
    for n in needles:
        assert n in res.output, (n, res.output)
    return res.output
