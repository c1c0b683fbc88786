"""Errors latscope raises on purpose. The CLI prints them as one line (``error: <msg>``), exit 1.

    LatscopeError
    ├── ConfigError        bad flags, workload file or dataset
    ├── TargetError        the server cannot be reached, or the local vLLM failed to start
    ├── ScrapeError        /metrics could not be read or parsed
    ├── TraceFormatError   a file is not a trace of the expected format, or is truncated
    └── HostCheckError     a host/GPU probe failed in a way that makes a check meaningless

Anything else reaching the CLI is a bug and shows a traceback only with ``--debug``.
"""

from __future__ import annotations


class LatscopeError(Exception):
    """Base class: the message is one line meant for the user."""


class ConfigError(LatscopeError):
    pass


class TargetError(LatscopeError):
    pass


class ScrapeError(LatscopeError):
    pass


class TraceFormatError(LatscopeError):
    def __init__(self, message: str, *, path: str = "", offset: int | None = None,
                 expected: str = "") -> None:
        parts = [message]
        if expected:
            parts.append(f"expected {expected}")
        if offset is not None:
            parts.append(f"at byte {offset}")
        text = "; ".join(parts)
        super().__init__(f"{path}: {text}" if path else text)
        self.path = path
        self.offset = offset
        self.expected = expected


class HostCheckError(LatscopeError):
    pass


class OutputError(LatscopeError):
    """The run directory could not be written (a full disk, a lost mount)."""
