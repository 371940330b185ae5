"""Client-chosen text made safe to print: ids, tool names, reasons and scopes escaped in
every human-readable line the package writes (private).

An id such as ``"\\x1b]0;...\\x07\\x1b[2J...\\r\\n99999.0s ip:203.0.113.66 42 drop_db"``
would otherwise clear an operator's screen, retitle their terminal, or forge a row of a
table or a line of a log. :func:`printable` escapes every control character (C0, DEL, C1),
the bidirectional and zero-width marks and the line and paragraph separators as
``\\xNN`` or ``\\uNNNN``, and the backslash itself, so that the escaped text is unambiguous.
JSON output needs none of this: its encoder escapes them already.
"""

from __future__ import annotations

import re

__all__ = ["printable"]

_UNSAFE = re.compile("[\\\\\x00-\x1f\x7f-\x9f\u061c\u200b-\u200f\u2028-\u202e\u2060-\u2069\ufeff]")


def _escape(match: re.Match[str]) -> str:
    char = match.group()
    if char == "\\":
        return "\\\\"
    code = ord(char)
    return f"\\x{code:02x}" if code <= 0xFF else f"\\u{code:04x}"


def printable(value: object) -> str:
    """*value* as text with nothing a terminal or a log reader would act on."""
    text = str(value)
    return _UNSAFE.sub(_escape, text) if _UNSAFE.search(text) else text
