"""``sweep.json``: the steps of a sweep, its analysis and (``latscope sweep``) what was asked for
and the findings, as the file holds them (``schema_version`` 1). ``latscope sweep`` rewrites it
after every step; ``latscope diagnose`` writes its sweep's steps and analysis the same way
(without ``meta`` and ``findings``), and ``--replay`` and ``show`` read it back here."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import msgspec
from msgspec import UNSET, UnsetType

from latscope.analysis.sweep import Step, SweepAnalysis
from latscope.errors import ConfigError
from latscope.results import FindingEntry, to_json_builtins

SCHEMA_VERSION = 1  # absent from files written before it: 1
FILE = "sweep.json"


class SweepMeta(msgspec.Struct, kw_only=True):
    """What ``latscope sweep`` was asked for."""

    url: str | None  # passwords redacted
    mode: str  # concurrency | rate
    loads: list[float] | str  # as given, or "auto"
    slo: str | None
    latency_cap: str | None
    backoff: float
    bench: dict[str, Any]  # the bench configuration of every step (BenchConfig.public_dict)


class SweepFile(msgspec.Struct, kw_only=True):
    schema_version: int = SCHEMA_VERSION
    meta: SweepMeta | UnsetType = UNSET  # latscope sweep's
    steps: list[Step] = []  # by load
    analysis: SweepAnalysis = msgspec.field(default_factory=SweepAnalysis)
    findings: list[FindingEntry] | UnsetType = UNSET  # latscope sweep's, most severe first


def write_sweep(path: Path, doc: SweepFile) -> None:
    """Whole or not at all (a reader, or a Ctrl-C, never sees half a file)."""
    from latscope.rundir import write_json

    write_json(path, to_json_builtins(doc))


def read_sweep(path: Path) -> SweepFile:
    """A sweep.json, typed; a ``ConfigError`` in one line for one latscope did not write."""
    from latscope.rundir import read_json

    data = read_json(path)
    try:
        return msgspec.convert(data, SweepFile, strict=False)
    except msgspec.ValidationError as exc:
        raise ConfigError(f"{path}: not a sweep latscope wrote ({exc})") from None
