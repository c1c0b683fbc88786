"""The per-request split (client records joined with the server's OTLP spans) as 80-column text.

Pure: ``per_request_lines`` returns the lines; ``print_per_request`` prints them. Milliseconds;
percentiles over requests are exact (no histogram buckets).
"""

from __future__ import annotations

from typing import Any

from latscope.analysis.join import COMPONENTS, PerRequestSplit, Stats

WIDTH = 80
_LABELS = dict(COMPONENTS)
# the columns of the slowest-requests table: (field, header)
_SLOW_COLUMNS = (("client_ttft_ms", "TTFT"), ("send_lag_ms", "lag"),
                 ("frontend_network_ms", "net+fe"), ("server_ttft_ms", "server"),
                 ("queue_ms", "queue"), ("prefill_ms", "prefill"), ("other_ms", "other"))
_GROUP_COLUMNS = (("client_ttft_ms", "TTFT"), ("queue_ms", "queue"), ("prefill_ms", "prefill"),
                  ("frontend_network_ms", "net+fe"))


def _ms(value: float | None) -> str:
    if value is None:
        return "-"
    return f"{value:.1f}" if abs(value) >= 10 else f"{value:.2f}"


def _pct_keys(stats: dict[str, Stats]) -> list[str]:
    first = next(iter(stats.values()), {})
    return [k for k in first if k.startswith("p")]


def per_request_lines(split: PerRequestSplit, *, slowest: int = 5) -> list[str]:
    lines = [f"Per request, joined with the server's spans: {split.joined} of "
             f"{split.completed} requests (ms)"]
    if not split.joined:
        return lines + [f"note: {n}" for n in split.notes]
    pcts = _pct_keys(split.stats)
    header = f"{'component':<26}" + "".join(f"{p:>9}" for p in pcts) + f"{'mean':>9}{'n':>6}"
    lines += [header, "-" * len(header)]
    for name, label in COMPONENTS:
        s = split.stats.get(name)
        if s is None:
            continue
        indent = "  " if name in ("queue_ms", "prefill_ms", "other_ms", "scheduler_ms") else ""
        lines.append(f"{indent + label:<26}" + "".join(f"{_ms(s.get(p)):>9}" for p in pcts)
                     + f"{_ms(s['mean']):>9}{s['count']:>6}")
    lines.append("net+fe = TTFT - send lag - server TTFT; other = server TTFT - queue - prefill")
    if split.slowest and slowest:
        lines += ["", f"Slowest {min(slowest, len(split.slowest))} requests by client TTFT (ms)"]
        head = f"{'#':>5} {'group':<10}" + "".join(f"{h:>9}" for _, h in _SLOW_COLUMNS)
        lines.append(head)
        for r in split.slowest[:slowest]:
            lines.append(f"{r.index:>5} {(r.group or '-')[:10]:<10}"
                         + "".join(f"{_ms(getattr(r, f)):>9}" for f, _ in _SLOW_COLUMNS))
    if split.groups:
        lines += ["", "By group: p50 / p99 (ms)"]
        lines.append(f"{'group':<14}{'n':>5}" + "".join(f"{h:>15}" for _, h in _GROUP_COLUMNS))
        for name, stats in split.groups.items():
            n = stats.get("client_ttft_ms", {}).get("count", 0)
            cells = "".join(f"{_pair(stats.get(f)):>15}" for f, _ in _GROUP_COLUMNS)
            lines.append(f"{(name or '-')[:14]:<14}{n:>5}{cells}")
    lines += [f"note: {n}" for n in split.notes]
    return [line if len(line) <= WIDTH else line[:WIDTH - 1] + "~" for line in _wrap(lines)]


def _pair(stats: Stats | None) -> str:
    if not stats:
        return "-"
    return f"{_ms(stats.get('p50'))}/{_ms(stats.get('p99'))}"


def _wrap(lines: list[str]) -> list[str]:
    """Notes are prose: wrap them at 80 columns instead of cutting them."""
    import textwrap

    out = []
    for line in lines:
        if line.startswith("note: ") and len(line) > WIDTH:
            out += textwrap.wrap(line, WIDTH, subsequent_indent="  ")
        else:
            out.append(line)
    return out


def print_per_request(split: PerRequestSplit, console: Any = None) -> None:
    from rich.console import Console

    console = console or Console()
    for line in per_request_lines(split):
        console.print(line, markup=False, highlight=False)
