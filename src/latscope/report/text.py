"""Plain-text helpers shared by every terminal renderer: the console and compact tables.

Output has to read well in an 80-column terminal *and* in a log file (``latscope trace x >
out.txt``). rich alone sizes a console from whichever standard stream is a terminal, so output
redirected from a wide terminal would be laid out for that terminal; ``make_console`` fixes 80
columns when the output is not a tty (unless ``COLUMNS`` says otherwise) and drops colour codes.

Kernel and event names are shortened by ``latscope.trace.names`` (one rule for every renderer).
"""

from __future__ import annotations

import os
import sys
from typing import Sequence

from rich import box
from rich.console import Console, Group, RenderableType
from rich.table import Table
from rich.text import Text

WIDE = 120  # from this width on, renderers may add columns (p50/p99, categories, ...)


def make_console(*, stderr: bool = False) -> Console:
    """The console every verb prints to: 80 columns and no colour when not a tty."""
    stream = sys.stderr if stderr else sys.stdout
    tty = _isatty(stream)
    width = None if tty or os.environ.get("COLUMNS", "").isdigit() else 80
    return Console(stderr=stderr, width=width, color_system="auto" if tty else None,
                   highlight=tty, emoji=False)


def _isatty(stream: object) -> bool:
    try:
        return bool(stream.isatty())  # type: ignore[attr-defined]
    except (AttributeError, ValueError):  # closed or replaced streams
        return False


def compact_table(**kwargs: object) -> Table:
    """A table with a rule under its header, no vertical rules and one space between columns:
    at 80 columns every character of border is one taken from the names."""
    return Table(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False, padding=(0, 0),
                 **kwargs)  # type: ignore[arg-type]


def titled(title: str, body: RenderableType) -> Group:
    """``body`` under a one-line title (a rich table title would wrap at the table's width)."""
    return Group(Text(title, style="bold"), body)


def room_left(width: int, columns: Sequence[Sequence[str]]) -> int:
    """Characters left for one more (last) column of a ``compact_table`` after ``columns``
    (each given as its header followed by its cells) at ``width``."""
    used = sum(max((len(c) for c in col), default=0) for col in columns)
    return width - used - len(columns)  # one space before each further column
