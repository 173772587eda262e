"""The one cell formatter and the one Markdown table writer every report uses
(:mod:`pipelines.eval.markdown`)."""

from __future__ import annotations

import math

from pipelines.eval.markdown import format_cell, table
from pipelines.eval.stats import CONSTANT, NO_PREDICTIONS, Interval, t_interval

NAN = math.nan


def test_table_escapes_pipes_and_line_breaks_in_cells():
    text = table(["name | kind", "value"], [["a|b", "one\ntwo"], ["c\r\nd", 0.5], ["e\rf", None]])
    lines = text.split("\n")
    assert lines == [
        "| name \\| kind | value |",
        "|---|---|",
        "| a\\|b | one<br>two |",
        "| c<br>d | 0.500 |",
        "| e<br>f | n/a |",
    ]
    assert all(ln.count(" | ") + 2 == ln.count("|") - ln.count("\\|") for ln in lines if ln.startswith("| "))


def test_table_cells_take_intervals_numbers_and_text():
    row = [t_interval([1.0, 2.0, 3.0]), t_interval([0.5]), t_interval([]), 7, 0.25, NAN, "x"]
    assert table(["a"] * 7, [row]).split("\n")[2] == (
        "| 2.000 (-0.484 to 4.484) | 0.500 (1 run) | n/a | 7 | 0.250 | n/a | x |"
    )


def test_percent_cells_name_the_reason_instead_of_bounds():
    def iv(est, low=NAN, high=NAN, note=""):
        return Interval(est, low, high, 10, "m", note)

    assert format_cell(iv(0.61, 0.60, 0.62), percent=True) == "61.0 (60.0–62.0)"
    assert format_cell(iv(0.015, -0.005, 0.03), percent=True, signed=True) == "+1.5 (-0.5 to +3.0)"
    assert format_cell(iv(0.5, 0.5, 0.5), percent=True) == "50.0 (same on every resample)"
    assert format_cell(iv(0.5, note=CONSTANT), percent=True) == "50.0 (predicts a constant)"
    assert format_cell(iv(0.5, note=NO_PREDICTIONS), percent=True) == "50.0*"
    assert format_cell(iv(0.5, 0.4, 0.6, "2/3 trials predict a constant"), percent=True) == (
        "50.0 (40.0–60.0; 2/3 trials predict a constant)"
    )
    assert format_cell(iv(0.5, note="2/3 trials predict a constant"), percent=True) == (
        "50.0 (2/3 trials predict a constant)"
    )
    assert format_cell(iv(0.5, note="1 seed: no interval over seeds"), percent=True) == "50.0"
    assert format_cell(None, percent=True) == "–" and format_cell(iv(NAN), percent=True) == "–"
