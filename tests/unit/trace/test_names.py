"""One kernel-name shortening rule (``latscope.trace.names``) for every place that shows a name:
the terminal tables, report.md and the trace findings, on the kernels of real traces."""

from __future__ import annotations

import dataclasses
import re

import pytest

from latscope.report import markdown
from latscope.report.model import TopKernel, TraceSection
from latscope.trace import names
from latscope.trace.analyze import analyze_trace
from latscope.findings.trace import trace_findings
from latscope.trace.taxonomy import load_taxonomy

B200 = "nvidia_b200_vllm_eager_tp8.pt.trace.json.gz"


@pytest.fixture(scope="module")
def b200(traces_dir):
    from latscope.trace.readers import read_trace

    return analyze_trace(read_trace(traces_dir / B200))


def _md_kernel_cells(text: str) -> list[str]:
    """The kernel column of report.md's top-kernel table: the code spans of its rows."""
    rows = text.split("| kernel", 1)[1].splitlines()[2:]
    return [re.match(r"\|\s*`+\s?(.*?)\s?`+\s*\|", r)[1] for r in rows if r.startswith("|")]


def test_report_md_shortens_kernels_as_the_terminal_does(b200):
    top = b200.devices[0].kernels.top
    assert any(len(k.name) > 70 for k in top)  # the real trace has names to shorten
    section = TraceSection(source=B200, device=None, window_ms=1.0, breakdown={}, categories=[],
                           top_kernels=[TopKernel(name=k.name, ms=1.0, count=k.count,
                                                  share=None, category=None) for k in top])
    cells = _md_kernel_cells(markdown._trace(section))
    assert cells == names.short_kernel_names([k.name for k in top], 70)
    assert all(len(c) <= 70 for c in cells)
    assert len(set(cells)) == len({k.name for k in top})  # rows stay apart


def test_trace_findings_shorten_cpu_events_by_the_same_rule(b200):
    events = [e.name for d in b200.devices
              for e in d.gaps.cpu_during_idle.top_events[:3]]
    idle = [f for f in trace_findings(b200) if f.id.endswith("idle")]
    assert idle and events
    text = " ".join(str(e.value) for f in idle for e in f.evidence)
    for event in events:
        assert names.short_event_name(event, 70) in text


def test_template_carriers_are_taxonomy_data(monkeypatch):
    name = "void ns::launch<std::array<char*, 1ul>, ns::RmsNormFunctor<float> >(int)"
    assert names.short_kernel_name(name, 30) == "ns::launch<…RmsNormFunctor…>"
    # with no carriers in the taxonomy, the first named argument (the array) names the kernel
    plain = dataclasses.replace(load_taxonomy(), carriers=re.compile(r"(?!)"))
    monkeypatch.setattr(names, "load_taxonomy", lambda: plain)
    assert names.short_kernel_name(name, 30) == "ns::launch<array…>"
