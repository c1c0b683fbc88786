"""``watch``'s two views of a frame made from real vLLM 0.32 pages: plain lines of at most 80
columns without a tty (a log file, ``| tee``), the rich panel on one."""

from __future__ import annotations

import io
import re

from latscope.campaign.watch import frame_of
from latscope.model import MetricSnapshot
from latscope.report.watch import PlainView, RichView, plain_lines
from latscope.server.metrics import parse_metrics_text


def _frames(page: str):
    def at(text: str, t: float) -> MetricSnapshot:
        return MetricSnapshot(int(t * 1e9), 1.7e9 + t, parse_metrics_text(text).samples,
                              scrape_ms=12.5)

    def scaled(factor: float) -> str:  # the server later: every counter and bucket x factor
        return re.sub(r"^(vllm:\S*(?:_total|_bucket|_sum|_count)(?:\{[^}]*\})?) (\S+)$",
                      lambda m: f"{m.group(1)} {float(m.group(2)) * factor!r}", page, flags=re.M)

    snaps = [at(page, 0), at(scaled(1.5), 2), at(scaled(2.0), 4)]
    return [frame_of(snaps[: i + 1], start_wall=1.7e9) for i in range(len(snaps))]


def test_without_a_tty_each_frame_is_a_few_lines_of_80_columns(fixtures_dir):
    page = (fixtures_dir / "vllm" / "cpu-vllm0.32" / "metrics.txt").read_text()
    frames = _frames(page)
    last = frames[-1]
    lines = plain_lines(last)
    assert all(len(line) <= 80 for line in lines), lines
    text = "\n".join(lines)
    # the last interval: 132 requests in 2 s, their TTFT with its bucket, the scrape's cost
    assert "66.0/s done" in text and "TTFT p50" in text and "[" in text
    assert "scrape 12 ms" in text or "scrape 13 ms" in text
    out = io.StringIO()
    view = PlainView(out)
    for f in frames:
        view(f)
    written = out.getvalue().splitlines()
    assert all(len(line) <= 80 for line in written)
    assert sum(line.startswith("  last minute:") for line in written) >= 1
    assert "\x1b[" not in out.getvalue()  # no colour codes in a log file


def test_on_a_tty_the_panel_shows_the_same_numbers(fixtures_dir):
    from rich.console import Console

    page = (fixtures_dir / "vllm" / "cpu-vllm0.32" / "metrics.txt").read_text()
    out = io.StringIO()
    view = RichView("http://127.0.0.1:8000", console=Console(file=out, force_terminal=True,
                                                            width=100))
    for f in _frames(page):
        view(f)
    view.close()
    text = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", out.getvalue())
    assert "latscope watch http://127.0.0.1:8000" in text
    assert "66.0/s done" in text and "TTFT goes to" in text and "last minute" in text
