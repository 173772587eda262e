"""Editing a copy of the fixture release line by line (RF2 files are CRLF, TAB-separated)."""

from __future__ import annotations

from pathlib import Path

FIXTURE = Path(__file__).resolve().parents[1] / "data" / "snomed_mini_20220531"
INT = "SnomedCT_MiniInternationalRF2_PRODUCTION_20220531T120000Z"  # the fixture's International package


def one(root: Path, pattern: str) -> Path:
    """The one file under ``root`` matching ``pattern``."""
    hits = sorted(root.rglob(pattern))
    assert len(hits) == 1, hits
    return hits[0]


def read_lines(p: Path) -> list[bytes]:
    return p.read_bytes().split(b"\r\n")


def write_lines(p: Path, rows: list[bytes]) -> None:
    p.write_bytes(b"\r\n".join(rows))
