"""Text from outside (a stored result's name, an imported file, a server's answer, a client's request path) made
safe to print: a control character is shown as its escape (``\\x1b``), never sent to the terminal, where an escape
sequence could retitle the window, clear the screen, move the cursor or write a hyperlink. Newlines and tabs stay,
except in what is printed within one log line (``single_line``): there a newline would start a line of the client's
own making."""

from __future__ import annotations

import re

# C0 controls but tab and newline, DEL, and the C1 controls (U+0080-U+009F: a UTF-8 terminal may take U+009B as CSI)
_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f]")
_CONTROL_ALL = re.compile("[\x00-\x1f\x7f-\x9f]")  # tab and newline too


def _escape(match: re.Match[str]) -> str:
    return f"\\x{ord(match.group()):02x}"


def printable(text: str, *, single_line: bool = False) -> str:
    """``text`` with every control character but newline and tab written as ``\\xNN`` (``'\\x1b[2J'`` prints as the
    seven characters ``\\x1b[2J``, clearing nothing); with ``single_line``, newline and tab too — for a client's
    text inside a log line, where ``/x\\nINFO: ...`` would otherwise forge a line of its own (found in review)."""
    return (_CONTROL_ALL if single_line else _CONTROL).sub(_escape, text)
