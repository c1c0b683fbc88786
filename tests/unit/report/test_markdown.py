"""report.md: verdict first, ranked findings, intervals, tables and tree, 100 columns."""

from __future__ import annotations

import re

import pytest

from latscope.report.markdown import WIDTH, render_markdown
from latscope.report.schema import ReportError
from report_samples import (bare_report, full_report, healthy_report, hostile_report, typed,
                            unreliable_client_report)


def _too_wide(md: str) -> list[str]:
    """Lines over 100 columns, except table rows and commands (kept whole to be copied)."""
    out, in_sh = [], False
    for line in md.splitlines():
        if line.strip().startswith("```"):
            in_sh = line.strip() == "```sh"
            continue
        if len(line) > WIDTH and not line.startswith("|") and not in_sh:
            out.append(line)
    return out


@pytest.mark.parametrize("build", [full_report, bare_report, healthy_report, hostile_report,
                                   unreliable_client_report])
def test_lines_fit_100_columns(build):
    assert _too_wide(render_markdown(typed(build()))) == []


def test_verdict_first_then_ranked_findings():
    md = render_markdown(typed(full_report()))
    body = [line for line in md.splitlines()[1:] if line.strip()]
    assert body[0].startswith("**VERDICT:** At the knee (c=16), 81% of mean TTFT")
    heads = re.findall(r"^### (\d+)\. \[(\w+)\] (.*)$", md, re.M)
    # information with no measured share is listed after them, as the terminal does
    # (findings.rank.display_group: one rule for every renderer)
    assert [(n, s) for n, s, _ in heads] == [("1", "CRITICAL"), ("2", "WARNING")]
    assert "More information (1):" in md and "(`host.numa_balancing`)" in md
    assert md.index("More information") > md.index("### 2. [WARNING]")
    assert "- **Impact:** 81% of mean client TTFT (512.0 ms) at knee (c=16)" in md
    assert "  - `vllm:num_requests_waiting` = 14 reqs (/metrics at 12.0 s)" in md
    assert "- skipped: no GPU on this host (`gpu.clocks`)" in md
    assert md.index("## Findings") < md.index("## Experiments") < md.index("## Sweep")


def test_experiments_with_interval_and_did_not_help():
    md = render_markdown(typed(full_report()))
    assert "1. `--max-num-seqs 16 (was 2)`: **helped**" in md
    assert "ttft_mean_ms 504 -> 59.7: -88.2%, 95% interval [-90.1%, -86.0%]" in md
    assert "2. `--enable-chunked-prefill`: **did not measurably help**" in md
    assert "  sudo sysctl kernel.numa_balancing=0 && latscope diagnose" in md


def test_sweep_table_marks_the_knee():
    md = render_markdown(typed(full_report()))
    row = next(line for line in md.splitlines() if line.startswith("| c=16 "))
    assert row.rstrip(" |").endswith("knee") and "474 ms" in row
    assert "Knee at c=16 (high confidence). Recommended load: c=14 (10% left of the knee)." in md


def test_decomposition_is_an_indented_tree_with_ms_and_share():
    md = render_markdown(typed(full_report()))
    block = md[md.index("knee (c=16):"):]
    lines = {line.strip().split("  ")[0]: line for line in block.splitlines()[1:12]}
    server = lines["server TTFT (arrival -> first token)"]
    queue = lines["queue (QUEUED -> SCHEDULED)"]
    indent = lambda s: len(s) - len(s.lstrip())  # noqa: E731
    assert indent(queue) == indent(server) + 2
    assert re.search(r"512 ms\s+81%$", queue)


def test_untrusted_text_cannot_become_markup_or_break_tables():
    r = hostile_report()
    r["findings"][1]["title"] = "two\nlines | with a pipe"
    r["stages"][0]["note"] = "a | b"
    md = render_markdown(typed(r))
    prose = re.sub(r"`[^`]*`", "", md)  # inside code spans markup is shown as it is
    assert not re.search(r"(?<!\\)<(script|img)", prose) and "\\<script>" in prose
    assert "`<script>" in md  # the kernel name, in a code span
    assert "### 2. [WARNING] two lines | with a pipe" in md
    assert "| a \\| b" in md


def test_long_kernel_names_shortened_with_a_pointer_to_json():
    md = render_markdown(typed(full_report()))
    # the terminal's rule (latscope.trace.names): the kernel and its functor, not a cut prefix
    assert "| `vectorized_elementwise_kernel<4, BinaryFunctor<…>, array<…>>` |" in md
    assert "void at::native::" not in md
    assert "full names in report.json" in md


def test_missing_sections_and_healthy_verdict():
    md = render_markdown(typed(bare_report()))
    assert md.count("not measured in this run") == 3
    assert "No trace analysed in this run." in md and "No fix was tried in this run." in md
    healthy = render_markdown(typed(healthy_report()))
    assert "**HEALTHY:**" in healthy and "Nothing found that costs latency." in healthy


def test_unreliable_client_warned_before_findings():
    md = render_markdown(typed(unreliable_client_report()))
    assert md.index("**WARNING:** the load generator was not reliable") < md.index("## Findings")


def test_share_above_100_percent_refused():
    r = full_report()
    r["verdict"]["share"] = 1.2
    with pytest.raises(ReportError, match="above 100%"):
        render_markdown(typed(r))



def test_every_renderer_lists_the_same_findings_first():
    # one rule (findings.rank.display_group): the terminal once hid information below 5% of
    # its target while report.md listed it among what to act on
    from latscope.report.diagnose import render_text
    from latscope.report.html import render_html

    report = full_report()
    report["findings"].insert(2, {
        "id": "latency.prefill", "severity": "info", "title": "prefill: 4 ms of 500 ms (1%)",
        "evidence": [], "why": "", "fix": "", "reference": "", "layer": "prefill",
        "impact": {"target": "ttft_mean", "share": 0.01}, "role": "symptom"})
    report["findings"].insert(2, {
        "id": "latency.engine_frontend", "severity": "info", "role": "symptom",
        "title": "tokenization + IPC: 40 ms of 500 ms (8%)", "evidence": [], "why": "",
        "fix": "", "reference": "", "layer": "frontend",
        "impact": {"target": "ttft_mean", "share": 0.08}})
    t = typed(report)
    md, html, text = render_markdown(t), render_html(t), render_text(t, width=80)
    main_md = md[md.index("## Findings"):md.index("More information")]
    main_html = html[html.index('<ol class="findings">'):html.index("</ol>")]
    main_text = text[text.index("Findings (ranked):"):]
    for main in (main_md, main_html, main_text):
        assert "tokenization + IPC: 40 ms" in main  # 8%: where the time goes, shown
        assert "prefill: 4 ms of 500 ms" not in main  # 1%: below the bar, in every renderer
    assert "prefill: 4 ms of 500 ms" in md[md.index("More information"):]
