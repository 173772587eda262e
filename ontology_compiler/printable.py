"""Text from the data made safe to print on a terminal: :func:`printable`.

RF2 terms, EHR codes and other data text may hold characters a terminal acts on instead of showing: ESC
(which starts a CSI sequence such as ``ESC [ 2 J``, clear the screen, or an OSC title change), the other
C0 controls, DEL, the C1 controls (U+0080 to U+009F; U+009B is an 8-bit CSI) and the Unicode
bidirectional embeddings, overrides and isolates (which reorder what follows them on the line). Every
command that prints text (summaries, tables, log lines, error messages) passes it through
:func:`printable`, which writes each such character as a visible escape (``\\x1b``, ``\\u202e``); line
breaks and TABs are kept. The stored data is never changed.

Light (no imports beyond ``re``), so the commands' printers can use it without loading anything.
"""

from __future__ import annotations

import re

__all__ = ["printable", "printable_json"]

# C0 controls but TAB and LF, DEL, C1 controls; bidi embeddings/overrides (U+202A-U+202E) and isolates
# (U+2066-U+2069)
_UNSAFE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")


def _escape(m: re.Match[str]) -> str:
    c = ord(m.group())
    return f"\\x{c:02x}" if c < 0x100 else f"\\u{c:04x}"


def printable(text: object) -> str:
    """``text`` (``str()`` of anything else) with every character a terminal would act on written as a
    visible escape (``"\\x1b[31m"`` prints as ``\\x1b[31m``); TAB and line breaks (LF) stay as they are."""
    s = text if isinstance(text, str) else str(text)
    return _UNSAFE.sub(_escape, s)


def printable_json(text: str) -> str:
    """JSON text (``json.dumps(..., ensure_ascii=False)``, which escapes only C0 controls) with the other
    characters a terminal would act on written as JSON escapes (``\\u009b``): the same JSON values, safe
    to print. (Outside strings JSON text holds none of them.)"""
    return _UNSAFE.sub(lambda m: f"\\u{ord(m.group()):04x}", text)
