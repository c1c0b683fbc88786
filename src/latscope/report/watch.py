"""``watch``'s view of a frame (``campaign.watch.Frame``): a ``rich`` panel redrawn in place on a
terminal, plain lines without one (a log file, ``| tee``): one line per scrape, and the last
minute's top finding on a line of its own whenever it changes."""

from __future__ import annotations

import textwrap
import time
from typing import Any, TextIO

from latscope.report.window import bounded, ms


def _rate(frame: Any) -> str:
    i = frame.interval
    if i is None or i.dt_s <= 0:
        return "-"
    done = i.counters.get("finished")
    arrived = i.arrivals
    text = f"{done / i.dt_s:.1f}/s done" if done is not None else "-"
    return text + (f", {arrived / i.dt_s:.1f}/s in" if arrived is not None else "")


def _gauges(frame: Any) -> str:
    i = frame.interval
    if i is None:
        return "-"
    g = i.gauges
    kv = f" KV {g['kv']:.0%}" if "kv" in g else ""
    pre = i.counters.get("preemptions")
    return (f"run {g.get('running', 0):g} wait {g.get('waiting', 0):g}{kv}"
            + (f" preempt +{pre:g}" if pre else ""))


def _lat(frame: Any, name: str) -> str:
    d = frame.latency.get(name)
    if not d:
        return "-"
    return f"p50 {bounded(d['p50'])} p99 {bounded(d['p99'])}"


def _split(frame: Any) -> str:
    if not frame.split:
        return "-"
    words = {"queue": "queue", "prefill": "prefill", "other": "rest"}
    return " ".join(f"{words[k]} {v:.0%}" for k, v in frame.split.items())


def _gpu(frame: Any) -> str:
    g = frame.gpu
    if not g:
        return "-"
    util = f"busy {g.util_pct:.0f}%" if g.util_pct is not None else ""
    mem = f"mem {g.mem_used_pct:.0f}%" if g.mem_used_pct is not None else ""
    return " ".join(p for p in (util, mem) if p) or "-"


def _scrape(frame: Any) -> str:
    text = f"{frame.scrape_ms:.0f} ms" if frame.scrape_ms is not None else "-"
    text += f", {frame.failures} failed" if frame.failures else ""
    last = frame.extra.get("last_error")
    return text + (f" (the last: {last})" if last else "")


WIDTH = 80


def plain_lines(frame: Any, width: int = WIDTH) -> list[str]:
    """One frame as a few lines of at most ``width`` columns: its parts packed in order."""
    stamp = time.strftime("%H:%M:%S", time.localtime(frame.wall_time))
    head = f"{stamp} +{frame.t_s:.0f}s"
    if not frame.has_vllm and frame.scrapes >= 2:
        return [f"{head} no vllm:* series (--disable-log-stats?); scrape {_scrape(frame)}"]
    parts = [_rate(frame), _gauges(frame), f"TTFT {_lat(frame, 'ttft')}",
             f"ITL {_lat(frame, 'itl')}", f"E2E {_lat(frame, 'e2e')}",
             f"TTFT: {_split(frame)}", f"GPU {_gpu(frame)}", f"scrape {_scrape(frame)}"]
    lines, line = [], head
    for part in parts:
        if len(line) + 3 + len(part) > width and line.strip():
            lines.append(line)
            line = "   " + part
        else:
            line += (" | " if line.strip() and line != head else " ") + part
    # a part longer than a line (a failed scrape's cause) wraps under its line
    return [w for one in lines + [line]
            for w in textwrap.wrap(one, width, subsequent_indent="     ",
                                   break_on_hyphens=False) or [one]]


class PlainView:
    """One line per frame; the top finding only when it changes."""

    def __init__(self, out: TextIO) -> None:
        self.out = out
        self.top = ""

    def __call__(self, frame: Any) -> None:
        print("\n".join(plain_lines(frame)), file=self.out, flush=True)
        # said again when the finding changes, not each time its share moves a point
        topic = frame.top.split(" (")[0]
        if topic != self.top:
            self.top = topic
            print("\n".join(textwrap.wrap(frame.top, WIDTH, initial_indent="  last minute: ",
                                          subsequent_indent="    ")), file=self.out, flush=True)

    def close(self) -> None:
        pass


class RichView:
    """A panel redrawn in place (``rich.live.Live``)."""

    def __init__(self, url: str, console: Any = None) -> None:
        from rich.live import Live

        self.url = url
        self.live = Live(auto_refresh=False, transient=False, console=console)
        self.live.start()

    def __call__(self, frame: Any) -> None:
        self.live.update(self.panel(frame), refresh=True)

    def panel(self, frame: Any) -> Any:
        from rich.panel import Panel
        from rich.table import Table

        table = Table.grid(padding=(0, 2))
        table.add_column(style="bold")
        table.add_column()
        rows = [("requests", _rate(frame)), ("batch", _gauges(frame)),
                ("TTFT", _lat(frame, "ttft")), ("ITL", _lat(frame, "itl")),
                ("E2E", _lat(frame, "e2e")), ("queue time", _lat(frame, "queue")),
                ("TTFT goes to", _split(frame)), ("GPU", _gpu(frame)),
                ("scrape", f"{_scrape(frame)} of the server's time, {frame.scrapes} so far"),
                ("last minute", frame.top)]
        for name, value in rows:
            table.add_row(name, value)
        title = (f"latscope watch {self.url}  +{frame.t_s:.0f} s  "
                 f"(the last interval; p in its bucket)")
        return Panel(table, title=title, subtitle="Ctrl-C ends it; the run stays on disk")

    def close(self) -> None:
        self.live.stop()


def view_for(out: TextIO, url: str) -> Any:
    return RichView(url) if out.isatty() else PlainView(out)


__all__ = ["PlainView", "RichView", "ms", "plain_lines", "view_for"]
