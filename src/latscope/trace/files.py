"""``trace.json``: the typed trace results (``trace.results``, durations in ns) as the file holds
them (durations in ms), and back.

Two verbs write a ``trace.json``, each its own model, both versioned (``schema_version``):

- ``latscope trace``: ``TraceRunFile``, every trace's analysis with its findings, the ranks side
  by side and the cross-rank view (two traces or more), the diff (``--compare``);
- ``latscope diagnose``: ``StoredTrace``, the profile's first rank as one analysis, and with a
  tensor-parallel profile every other rank's and the cross-rank view.

The JSON edge is here: a ``*_ns`` number is written as ``*_ms`` (value / 1e6) and read back so;
a ``*_ns`` key whose value is null keeps its name (``next_issued_after_gap_start_ns`` of a gap
no CPU call issued). ``trace_json_schema`` is the model's JSON Schema with that renaming done.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, TypeVar

import msgspec
from msgspec import UNSET, UnsetType

from latscope.model import Finding
from latscope.results import FindingEntry, json_schema, section
from latscope.trace.results import Comparison, CrossRankView, RankSummary, TraceAnalysis

SCHEMA_VERSION = 1  # trace.json's, either verb's (absent from files written before it)
FILE = "trace.json"
T = TypeVar("T", bound=msgspec.Struct)


class TraceEntry(TraceAnalysis, kw_only=True):
    """One trace of ``latscope trace``: its analysis and its findings, most severe first."""

    findings: list[FindingEntry]


class TraceRunFile(msgspec.Struct, kw_only=True):
    """``latscope trace``'s trace.json."""

    schema_version: int = SCHEMA_VERSION
    traces: list[TraceEntry]
    summary: list[RankSummary] | UnsetType = UNSET  # the ranks side by side (two traces or more)
    cross_rank: CrossRankView | UnsetType = UNSET
    compare: Comparison | UnsetType = UNSET


class StoredTrace(TraceAnalysis, kw_only=True):
    """``latscope diagnose``'s trace.json: the first rank's analysis; with one trace per rank,
    every other rank's and the cross-rank view too."""

    schema_version: int = SCHEMA_VERSION
    other_ranks: list[TraceAnalysis] | UnsetType = UNSET
    cross_rank: CrossRankView | UnsetType = UNSET

    def ranks(self) -> list[TraceAnalysis]:
        """Every rank's analysis, the first one first."""
        others = self.other_ranks if isinstance(self.other_ranks, list) else []
        return [self, *others]


@dataclass(slots=True)
class TraceResult:
    path: str
    result: TraceAnalysis
    findings: list[Finding]  # most severe first


@dataclass(slots=True)
class TraceRun:
    """``latscope trace``'s work so far (``campaign.tracefiles``): each trace's analysis and
    findings, the cross-rank view of two or more, the diff of ``--compare``, every finding (for
    findings.json) and the first trace that could not be analysed (the ones before it kept)."""

    traces: list[TraceResult] = field(default_factory=list)
    cross_rank: CrossRankView | None = None
    rank_findings: list[Finding] = field(default_factory=list)
    comparison: Comparison | None = None
    findings: list[Finding] = field(default_factory=list)
    error: Exception | None = None

    def file(self) -> TraceRunFile:
        """What trace.json holds of it."""
        out = TraceRunFile(traces=[
            TraceEntry(source=t.result.source, devices=t.result.devices,
                       findings=[section(f.to_dict(), FindingEntry) for f in t.findings])
            for t in self.traces])
        if self.cross_rank is not None:
            out.summary, out.cross_rank = self.cross_rank.ranks, self.cross_rank
        if self.comparison is not None:
            out.compare = self.comparison
        return out


def to_json_units(value: Any) -> Any:
    """Recursively rename ``x_ns`` keys to ``x_ms`` (value / 1e6); everything else unchanged."""
    if isinstance(value, dict):
        out = {}
        for key, item in value.items():
            if isinstance(key, str) and key.endswith("_ns") and _number(item):
                out[key[:-3] + "_ms"] = item / 1e6
            else:
                out[key] = to_json_units(item)
        return out
    if isinstance(value, list):
        return [to_json_units(v) for v in value]
    return value


def from_json_units(value: Any) -> Any:
    """The inverse of ``to_json_units``: every ``x_ms`` number back to ``x_ns``."""
    if isinstance(value, dict):
        out = {}
        for key, item in value.items():
            if isinstance(key, str) and key.endswith("_ms") and _number(item):
                out[key[:-3] + "_ns"] = item * 1e6
            else:
                out[key] = from_json_units(item)
        return out
    if isinstance(value, list):
        return [from_json_units(v) for v in value]
    return value


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def as_json(result: msgspec.Struct) -> Any:
    """A typed result as the file holds it: builtins, durations in ms."""
    return to_json_units(msgspec.to_builtins(result))


def from_json(data: Any, kind: type[T]) -> T:
    """A file's (ms) content as the typed result ``kind``; ``msgspec.ValidationError`` names
    the first key that does not fit."""
    return msgspec.convert(from_json_units(data), kind, strict=False)


def read_stored(data: Any, path: str = FILE) -> StoredTrace:
    """diagnose's trace.json content as the typed ``StoredTrace``; a ``ConfigError`` in one
    line naming the file and the key for one that is not what latscope writes."""
    from latscope.errors import ConfigError

    try:
        return from_json(data, StoredTrace)
    except msgspec.ValidationError as exc:
        raise ConfigError(f"{path}: not a trace analysis latscope wrote ({exc})") from None


def trace_json_schema(kind: type[msgspec.Struct]) -> dict[str, Any]:
    """The JSON Schema of a trace.json model (``TraceRunFile`` or ``StoredTrace``) as the file
    holds it: every ``*_ns`` property as ``*_ms``, a number."""
    schema = json_schema(kind, f"latscope trace.json ({kind.__name__}), schema_version "
                               f"{SCHEMA_VERSION}; durations in ms")
    return in_json_units(schema)


def in_json_units(schema: dict[str, Any]) -> dict[str, Any]:
    """A generated schema of a model holding trace results as ``as_json`` writes it: every
    ``*_ns`` property of its definitions as ``*_ms``, a number."""
    for definition in schema.get("$defs", {}).values():
        _ms_properties(definition)
    return schema


def _ms_properties(definition: dict[str, Any]) -> None:
    """``x_ns`` -> ``x_ms`` (a number); one that may be null may also stay ``x_ns``: null."""
    props = definition.get("properties") or {}
    required = definition.get("required") or []
    for name in [k for k in props if k.endswith("_ns")]:
        spec = props.pop(name)
        ms = name[:-3] + "_ms"
        props[ms] = {"type": "number"}
        if any(option.get("type") == "null" for option in spec.get("anyOf", [])):
            props[name] = {"type": "null"}
            if name in required:
                required.remove(name)  # either x_ms (a number) or x_ns (null)
        elif name in required:
            required[required.index(name)] = ms
