"""Every JSON file a run directory holds, its model and its JSON Schema, in one table: the models
live in the layer that writes each file; the schemas are generated from them here
(``run_file_schema``), so a file and its schema cannot drift apart.

==========================  ===========================================  =====================
file                        model                                        written by
==========================  ===========================================  =====================
manifest.json               ``runfiles.Manifest``                        every verb, load runs
summary.json                ``runfiles.BenchSummary``                    load runs
decomposition.json          ``analysis.decompfile.DecompositionFile``    load runs (scraped)
sweep.json                  ``analysis.sweepfile.SweepFile``             sweep, diagnose
trace.json                  ``trace.files.TraceRunFile`` (trace),        trace, diagnose
                            ``trace.files.StoredTrace`` (diagnose)
telemetry/telemetry.json    ``telemetry.files.TelemetrySummary``         load runs (GPU)
host/cpu.json               ``env.hostload.HostCpu``                     load runs
tune.json                   ``analysis.tune.TuneFile``                   tune
report.json                 ``report.model.Report``                      diagnose
compare.json                ``analysis.compare_model.Comparison``        compare
findings.json               ``findings/schema.json`` (hand-written)      every verb
==========================  ===========================================  =====================
"""

from __future__ import annotations

import json
from importlib import resources
from typing import Any

import msgspec

from latscope.analysis.compare_model import Comparison
from latscope.analysis.decompfile import DecompositionFile
from latscope.analysis.sweepfile import SweepFile
from latscope.analysis.tune import TuneFile
from latscope.env.hostload import HostCpu
from latscope.errors import ConfigError
from latscope.report.model import report_schema
from latscope.results import json_schema
from latscope.runfiles import BenchSummary, Manifest
from latscope.telemetry.files import TelemetrySummary
from latscope.trace.files import StoredTrace, TraceRunFile, in_json_units, trace_json_schema

# file -> (its model, what its schema says it is)
_MODELS: dict[str, tuple[type[msgspec.Struct], str]] = {
    "manifest.json": (Manifest, "a run directory's manifest.json"),
    "summary.json": (BenchSummary, "a load run's summary.json"),
    "decomposition.json": (DecompositionFile, "a load run's decomposition.json (ms)"),
    "sweep.json": (SweepFile, "sweep.json"),
    "telemetry.json": (TelemetrySummary, "telemetry/telemetry.json"),
    "cpu.json": (HostCpu, "host/cpu.json"),
    "tune.json": (TuneFile, "tune.json"),
}
FILES = (*_MODELS, "trace.json", "report.json", "compare.json", "findings.json")


def run_file_schema(name: str, kind: str = "") -> dict[str, Any]:
    """The JSON Schema of the run directory file ``name`` (``telemetry/telemetry.json`` and
    ``host/cpu.json`` may be named by their last part); ``kind`` is the verb that wrote it
    where two verbs write one name differently (trace.json: "trace" or "diagnose")."""
    name = name.rsplit("/", 1)[-1]
    if name == "trace.json":
        return trace_json_schema(TraceRunFile if kind == "trace" else StoredTrace)
    if name == "report.json":
        return report_schema()
    if name == "compare.json":  # its trace diff in ms, as trace.json's
        return in_json_units(json_schema(Comparison, "latscope compare.json; durations in ms"))
    if name == "findings.json":
        schema: dict[str, Any] = json.loads(
            resources.files("latscope.findings").joinpath("schema.json").read_text())
        return schema
    if name not in _MODELS:
        raise ConfigError(f"{name}: not a run directory file latscope writes "
                          f"({', '.join(FILES)})")
    model, what = _MODELS[name]
    return json_schema(model, f"latscope {what}")
