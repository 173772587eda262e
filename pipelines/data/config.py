"""Options of ``prepare`` (light: no torch, no pyarrow; ``hrrbert prepare`` takes its defaults from here).

The sources (one folder per reader, :data:`pipelines.data.readers.READERS`), the program and the split
sizes (:class:`pipelines.data.splits.SplitOptions`) are given beside a :class:`PrepareConfig`. Of its
fields, ``max_len``, ``max_visits`` and ``unknown`` go into the dataset id (with the splits, the input
files and the content of ``hold_out``); ``out`` and ``name`` only say where the dataset goes.
"""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = ["UNKNOWN_CODES", "PrepareConfig"]

UNKNOWN_CODES = ("drop", "unk")  # what prepare does with a code the program does not know


@dataclass(frozen=True)
class PrepareConfig:
    """Where ``prepare`` writes a dataset and how it tokenizes the source."""

    out: str = field(default="artifacts/datasets", metadata={"help": "Folder of <name>/<dataset_id>/."})
    name: str | None = field(
        default=None,
        metadata={
            "help": "Dataset name: one folder under --out (default: <source kind>-<input folder name>)."
        },
    )
    max_len: int = field(default=128, metadata={"help": "Tokens per sequence, [CLS] included."})
    max_visits: int = field(default=100, metadata={"help": "Visits (segments) per sequence."})
    unknown: str = field(
        default="drop",
        metadata={"help": "Codes not in the program: drop them (counted) or map them to [UNK]."},
    )
    hold_out: str | None = field(
        default=None,
        metadata={
            "help": "Parquet or CSV file with columns vocabulary, code: hold these codes out (the ROOD "
            "split) instead of choosing them."
        },
    )
