"""A comparison written to its run directory (kind ``compare``): ``compare.json`` (the typed
comparison, which ``latscope show`` re-prints), ``findings.json``, ``report.md`` and
``report.html``; the manifest's status says how it ended and ``exit_code`` what the gate said."""

from __future__ import annotations

from latscope.analysis.compare_model import Comparison
from latscope.model import Finding
from latscope.rundir import RunDir, write_bytes

COMPARE_JSON = "compare.json"


def write_comparison(run: RunDir, comparison: Comparison) -> None:
    from latscope.report.compare_html import render_html
    from latscope.report.compare_md import render_markdown

    run.write(COMPARE_JSON, comparison.to_dict())
    run.write_findings([Finding.from_dict(f) for f in comparison.findings])
    write_bytes(run.file("report.md"), render_markdown(comparison).encode())
    write_bytes(run.file("report.html"), render_html(comparison).encode())
    verdict = f"{comparison.status}: {comparison.headline}"
    if comparison.layer_sentence and comparison.status != "not comparable":
        verdict += f". {comparison.layer_sentence}"
    run.finish("ok", exit_code=comparison.exit_code, verdict=verdict,
               comparison=comparison.status)
