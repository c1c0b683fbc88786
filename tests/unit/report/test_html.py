"""report.html from report dicts: content, escaping, edge cases, self-containment."""

from __future__ import annotations

import re

import pytest

from latscope.report.html import render_html
from latscope.report.schema import ReportError
from report_samples import (LONG_KERNEL, bare_report, full_report, healthy_report, hostile_report,
                            typed, unreliable_client_report)

# Rendering draws five charts (~0.1-1 s each): one page per case, shared by its tests.


@pytest.fixture(scope="module")
def page() -> str:
    return render_html(typed(full_report()))


@pytest.fixture(scope="module")
def hostile_page() -> str:
    return render_html(typed(hostile_report()))


@pytest.fixture(scope="module")
def bare_page() -> str:
    return render_html(typed(bare_report()))


def _section(html: str, name: str) -> str:
    match = re.search(rf'<section id="{name}".*?</section>', html, re.S)
    assert match, f"section {name} missing"
    return match.group(0)


def test_header_and_verdict(page):
    r = full_report()
    head = page[: page.index('<section id="findings"')]
    assert r["target"]["url"] in head and "tiny-llama" in head
    assert "latscope diagnose --url http://127.0.0.1:8000 --budget 6m" in head
    assert 'class="verdict problem"' in head
    assert "At the knee (c=16), 81% of mean TTFT is queueing" in head
    assert "81% of mean client TTFT at knee (c=16)" in head  # the one wording (impact.describe)
    assert 'id="client"' not in page  # the client was reliable: no banner


def test_findings_ranked_with_impact_evidence_and_fix(page):
    findings = _section(page, "findings")
    titles = [f["title"] for f in full_report()["findings"][:3]]
    positions = [findings.index(t) for t in titles]
    assert positions == sorted(positions)
    # ok/skipped are checks; information with no measured share is listed below the ranked
    # ones, as the terminal and report.md do (findings.rank.display_group)
    assert findings.count('<li class="finding') == 2
    assert "1 more: information below the list" in findings
    assert "81% of mean client TTFT (512.0 ms) at knee (c=16)" in findings
    assert "/metrics at 12.0 s" in findings and "14 reqs" in findings
    assert "Raise --max-num-seqs (e.g. 16)" in findings
    assert ('<a href="https://docs.vllm.ai/en/latest/configuration/optimization.html"'
            in findings)
    assert "2 checks passed or could not run" in findings and "no GPU on this host" in findings


def test_experiments_show_interval_and_plain_did_not_help(page):
    exp = _section(page, "experiments")
    assert "[-90.1%, -86.0%]" in exp and "-88.2%" in exp
    assert "[-4.2%, +7.5%]" in exp
    assert exp.count("<b>did not measurably help</b>") == 1 and exp.count("<b>helped</b>") == 1
    assert "warm-up excluded" in exp and "arms A B A B A B" in exp
    assert "sudo sysctl kernel.numa_balancing=0" in exp  # the proposal's command


def test_every_plot_drawn_as_inline_svg(page):
    for name in ("experiments", "sweep", "decomposition", "timeseries", "trace"):
        assert "<svg" in _section(page, name), name
    assert "knee c=16" in _section(page, "sweep") and "recommended c=14" in _section(page, "sweep")


def test_decomposition_table_is_a_tree(page):
    dec = _section(page, "decomposition")
    assert re.search(r'class="depth-2 leaf"><td[^>]*>queue \(QUEUED -&gt; SCHEDULED\)</td>'
                     r'<td class="n">512 ms</td><td class="n">81%</td>', dec)


def test_long_kernel_name_kept_whole(page):
    from markupsafe import escape

    assert str(escape(LONG_KERNEL)) in _section(page, "trace")


def test_self_contained_no_script_no_external_resource(page):
    assert "<script" not in page.lower()
    assert "default-src 'none'" in page  # the browser refuses any fetch the page might try
    # only navigation links may point outside; nothing is loaded from anywhere
    assert not re.search(r'\s(src|srcset|xlink:href)="(?!data:)', page)
    assert not re.search(r'url\((?!#)', page)
    assert len(page.encode()) < 1_000_000


def test_untrusted_text_is_escaped(hostile_page):
    low = hostile_page.lower()
    assert "<script" not in low and "<img" not in low and "onerror=alert(1)>" not in low
    assert "&lt;script&gt;alert(" in hostile_page  # shown as text, in the title and the charts
    assert 'href="javascript:' not in low
    assert "javascript:alert(1)" in hostile_page  # the reference still shows, as plain text


def test_healthy_styling_and_no_findings():
    page = render_html(typed(healthy_report()))
    assert 'class="verdict healthy"' in page and ">Healthy<" in page
    assert "Nothing found that costs latency." in page


def test_missing_sections_say_not_measured(bare_page):
    assert "<svg" not in bare_page
    for section, text in (("sweep", "not measured in this run"),
                          ("decomposition", "not measured in this run"),
                          ("timeseries", "not measured in this run"),
                          ("trace", "No trace analysed in this run."),
                          ("experiments", "No fix was tried in this run.")):
        assert text in _section(bare_page, section), section


def test_unreliable_client_banner():
    page = render_html(typed(unreliable_client_report()))
    banner = _section(page, "client")
    assert "not reliable" in banner and "event-loop lag p99 182 ms" in banner
    assert "40.1 ms" in banner


def test_rate_sweep_labels_loads_in_req_per_s():
    r = full_report()
    r["sweep"]["load_kind"] = "rate"
    sweep = _section(render_html(typed(r)), "sweep")
    assert "Knee at <b>16 req/s</b>" in sweep and "<td>8 req/s</td>" in sweep


@pytest.mark.parametrize("mutate, message", [
    (lambda r: r["findings"][0]["impact"].update(share=1.3), "above 100%"),
    (lambda r: r["decompositions"][0]["components"][4].update(share=2.0), "above 100%"),
    (lambda r: r["trace"]["breakdown"].update(idle=float("nan")), "not a number"),
    (lambda r: r.update(schema_version=2), "schema_version 2 is not supported"),
    (lambda r: r["findings"][0].update(severity="fatal"), "severity"),
])
def test_impossible_or_unknown_input_refused(mutate, message):
    r = full_report()
    mutate(r)
    with pytest.raises(ReportError, match=message):
        render_html(typed(r))
