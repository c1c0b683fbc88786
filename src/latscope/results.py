"""The typed results that flow from the producers to the renderers: the verdict, each finding as
a report holds it, the client's reliability, the A/B proofs and the proposals, the stages.

msgspec Structs in the ground, so that the findings engine produces them (``findings.conclude``)
and every renderer and run-directory reader takes them, with no layer converting dicts at the
end. ``report.model`` builds report.json from them; a key a producer adds that a Struct lacks is
refused (``forbid_unknown_fields``), never dropped. A key only some producers (or older
report.json files) have is ``UNSET`` when absent and left out of ``to_dict``, so a file read and
written again keeps the keys it had, in field order.
"""

from __future__ import annotations

from pathlib import PurePath
from typing import Any, TypeVar

import msgspec
from msgspec import UNSET, UnsetType

T = TypeVar("T")
# a number as its producer wrote it: an int stays an int (64, not 64.0, in report.json)
Number = int | float


class _Section(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    """A section converted from a producer's dict: an unknown key is an error, not lost."""

    def to_dict(self) -> dict[str, Any]:
        """As report.json holds it: its keys in field order, an ``UNSET`` one left out."""
        out: dict[str, Any] = _plain(self)
        return out


class Verdict(_Section, kw_only=True):
    """``findings.verdict``: a cause or symptom (with its share), capacity, healthy or none."""

    text: str
    kind: str | UnsetType = UNSET  # cause | symptom | capacity | healthy | none (absent: older)
    finding_id: str | None
    healthy: bool
    severity: str | UnsetType = UNSET
    share: Number | None | UnsetType = UNSET
    target: str | None | UnsetType = UNSET
    measured_at: str | None | UnsetType = UNSET
    impact: str | None | UnsetType = UNSET  # the impact in words
    host_busy: bool | UnsetType = UNSET  # named before the verdict: the host was busy
    # named before the verdict: the prefix cache served prompts the server had seen
    prompts_resent: bool | UnsetType = UNSET

    def measured(self) -> dict[str, Any]:
        """Its share, target and load, as ``findings.impact.describe`` reads an impact."""
        return {k: v for k in ("target", "share", "measured_at")
                if not isinstance(v := getattr(self, k), UnsetType)}


class EvidenceItem(_Section):
    name: str
    value: Any  # a number, a string, a bool: whatever was read
    unit: str
    source: str


class FindingEntry(_Section):
    """One ranked finding as the report holds it (``Finding.to_dict``)."""

    id: str
    severity: str  # model.Severity's value
    title: str
    evidence: list[EvidenceItem]
    why: str
    fix: str
    reference: str
    layer: str
    # target, share, measured_at and (some) value_ms, by, explains: findings.impact's, open
    impact: dict[str, Any] | None
    role: str


class Stage(_Section):
    name: str
    status: str  # ok | failed | skipped | cut | interrupted
    seconds: Number
    note: str


class ClientSection(_Section, kw_only=True):
    """Whether the client's own timing was reliable at the load it was judged at, and why
    (``campaign.conclude``). Every key is absent (``{}``) where no load was measured, and
    off_cpu_share in report.json files older than it."""

    reliable: bool | UnsetType = UNSET
    why: str | UnsetType = UNSET
    off_cpu_share: Number | None | UnsetType = UNSET
    loop_lag_p99_ms: Number | None | UnsetType = UNSET
    loop_lag_mean_ms: Number | None | UnsetType = UNSET
    send_lag_p99_ms: Number | None | UnsetType = UNSET
    cpu_utilization: Number | None | UnsetType = UNSET
    cpu_per_token_us: Number | None | UnsetType = UNSET
    fix: str | UnsetType = UNSET
    load: Number | None | UnsetType = UNSET
    same_host: bool | None | UnsetType = UNSET


class Proposal(_Section):
    """A fix not measured here, with the command that would measure it."""

    finding_id: str
    change: str
    why: str
    note: str
    command: str


class Guard(_Section):
    """A metric an A/B's fix must not make much worse, measured on the same runs."""

    metric: str
    a_values: list[Number | None]
    b_values: list[Number | None]
    change_pct: Number | None
    ci95_pct: list[Number] | None
    verdict: str | None


class ABResult(_Section, kw_only=True):
    """One A/B proof (``campaign.experiment.Experiment.to_dict``; ``campaign.priority`` adds
    measured, server_policy, outcome and proposal). Keys absent from older report.json files,
    or written by only one producer, are ``UNSET`` when absent."""

    finding_id: str
    change: str
    metric: str
    load: Number
    arms: list[str]
    a_values: list[Number | None]
    b_values: list[Number | None]
    a_mean: Number | None
    b_mean: Number | None
    change_pct: Number | None
    ci95_pct: list[Number] | None
    helped: bool
    verdict: str | None
    warmup_excluded: bool
    prefix_cache_hit_rate: dict[str, list[Number | None]]  # one rate a run, per arm
    run_dirs: list[str]
    reruns: list[dict[str, Any]] | UnsetType = UNSET  # {run, why}: measured again
    client_unreliable_runs: list[str] | UnsetType = UNSET
    note: str
    guard: Guard | UnsetType = UNSET
    guards: list[Guard] | UnsetType = UNSET
    measured: bool | UnsetType = UNSET
    server_policy: dict[str, str] | UnsetType = UNSET
    outcome: str | UnsetType = UNSET
    proposal: str | UnsetType = UNSET

    def words(self) -> str:
        """The A/B's result in words: the one wording of the verdict, every renderer and the
        priority proof (``ab_outcome``)."""
        guards = [self.guard] if isinstance(self.guard, Guard) else []
        guards += self.guards if isinstance(self.guards, list) else []
        worse = list(dict.fromkeys(g.metric for g in guards if g.verdict == "worse"))
        verdict = self.verdict or ("better" if self.helped else None)
        return ab_outcome(verdict, worse)


def ab_outcome(verdict: str | None, worse_guards: list[str]) -> str:
    """"helped" (the metric's whole 95% interval on the better side), "helped, at a cost (M
    worse)" (a guard M worse with 95% confidence), "made it worse" (the whole interval on the
    worse side) or "did not measurably help" (the interval holds no change, or the A/B failed:
    +200% [+125%, +300%] once read "did not measurably help" on an H200 gateway A/B, so the
    side is read from the verdict, never from the sign alone)."""
    if verdict == "better":
        return f"helped, at a cost ({', '.join(worse_guards)} worse)" if worse_guards \
            else "helped"
    return "made it worse" if verdict == "worse" else "did not measurably help"


def _plain(value: Any) -> Any:
    """Structs as dicts in field order, recursively, without the fields msgspec's encoder
    leaves out (``UNSET``; a default where the Struct omits defaults); every other value left
    as it is (the JSON writer encodes those, as it always did)."""
    if isinstance(value, msgspec.Struct):
        defaults = _defaults_omitted(type(value))
        return {name: _plain(v) for name in value.__struct_fields__
                if (v := getattr(value, name)) is not UNSET
                and not (name in defaults and v == defaults[name])}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value


def _defaults_omitted(kind: type[msgspec.Struct]) -> dict[str, object]:
    """Each field's default, where the Struct leaves a field at its default out of its JSON
    (``omit_defaults``); none otherwise."""
    if not kind.__struct_config__.omit_defaults:
        return {}
    return {f.name: f.default for f in msgspec.structs.fields(kind)
            if f.default is not msgspec.NODEFAULT}


def json_schema(model: type[msgspec.Struct], description: str) -> dict[str, Any]:
    """The JSON Schema of a run directory file, generated from its model."""
    schema: dict[str, Any] = msgspec.json.schema(model)
    schema["description"] = description
    return schema


def to_json_builtins(value: msgspec.Struct) -> Any:
    """A typed result as the plain values its JSON file holds (what the run directory's writer
    encodes): numpy numbers as Python's, a path as its text."""
    return msgspec.to_builtins(value, enc_hook=_builtin)


def _builtin(value: Any) -> Any:
    item = getattr(value, "item", None)  # a numpy scalar
    if item is not None:
        return item()
    if isinstance(value, PurePath):
        return str(value)
    raise TypeError(f"not JSON serialisable: {type(value).__name__}")


def section(data: Any, kind: type[T]) -> T:
    """A producer's dict as its Struct; an unknown or missing key raises (a model to update)."""
    return msgspec.convert(data, kind, strict=False)
