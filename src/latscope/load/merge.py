"""The driver's side of a workers run's merge (``latscope.load.workers``): what it knows of each
worker (``WorkerState``), the batches of lines the workers send written to the run's file, each
worker's statistics merged into the run's (a dead worker's counted from its records in the
file), and the client's own figures over every worker."""

from __future__ import annotations

import queue
import threading
from dataclasses import dataclass
from typing import Any

import orjson

from latscope.errors import OutputError
from latscope.load.clocks import ClockOffset, shift_record
from latscope.load.runner import _Run, client_warnings
from latscope.load.shares import Share
from latscope.load.summary import off_cpu_share
from latscope.load.worker import HostFacts
from latscope.model import RequestRecord
from latscope.rundir import REQUESTS, mend_torn_lines, record_without_times
from latscope.stats import RunStats, distribution


@dataclass
class WorkerState:
    index: int
    handle: Any
    share: Share
    facts: HostFacts | None = None  # sent when it was ready
    clock: ClockOffset | None = None
    clock_after: ClockOffset | None = None
    figures: dict[str, Any] | None = None
    error: str | None = None
    received: int = 0
    measured: int = 0  # of them, not warm-up (a closed loop's ramp is): the share's size counts these
    thread: threading.Thread | None = None
    appends: bool = False  # it appends its lines to requests.jsonl itself (``_appends_itself``)
    # the worker's statistics of its share (and per group), sent at its end; None where it
    # never ended (it died, the run was stopped)
    stats: RunStats | None = None
    groups: dict[str, RunStats] | None = None

    def host_fields(self) -> dict[str, str | int | None]:
        return self.facts.fields() if self.facts is not None else {}

    def report(self) -> dict[str, Any]:
        fig = self.figures or {}
        lost = (self.share.size - self.measured) if self.error and self.share.size else None
        return {"worker": self.index, **self.host_fields(), "requests": self.received,
                "measured": self.measured,
                "share": self.share.size, "concurrency": self.share.concurrency,
                "records_written_by": "worker" if self.appends else "driver",
                "cpu_s": fig.get("cpu_s"), "wall_s": fig.get("wall_s"),
                "cpu_utilization": fig.get("cpu_utilization"),
                "loop_lag_ms": fig.get("loop_lag_ms", {}),
                "run_queue_wait_s": fig.get("run_queue_wait_s"),
                "send_lag_p99_ms": fig.get("send_lag_p99_ms"),
                "event_loop": fig.get("event_loop"),
                "stream_parser": fig.get("stream_parser"), "prompts": fig.get("prompts"),
                "clock": self.clock.to_dict() if self.clock else None,
                "clock_after": self.clock_after.to_dict() if self.clock_after else None,
                "stagger": fig.get("stagger"),
                "error": self.error, "requests_not_returned": lost}



Inbox = queue.SimpleQueue  # (WorkerState, bytes): the batches of lines the workers sent


def write_batches(run: _Run, inbox: Inbox) -> None:
    """The batches of lines the workers sent so far, written to the run's requests.jsonl.
    They are counted in each worker's statistics, merged at its end (``merge_worker_stats``):
    the driver only writes them (reading each for the statistics took ~7 us of its CPU a
    record, and bounded how many workers it could take)."""
    while True:
        try:
            state, data = inbox.get_nowait()
        except queue.Empty:
            return
        offset = state.clock.applied_ns if state.clock else 0
        if not offset and run.on_record is None:
            # on the driver's clock already: the worker's lines are the run's, as they came
            # (not even their newlines counted: bytes.count took ~1.5 us a line)
            run.writer.append_lines(data)
            continue
        for line in data.splitlines(keepends=True):
            record = shift_record(RequestRecord.from_dict(orjson.loads(line)), offset)
            run._finished(record, None if offset else line, count=False)



def merge_worker_stats(run: _Run, states: list[WorkerState]) -> None:
    """Each worker's statistics merged into the run's, moved onto the driver's clock. A
    worker whose statistics never came (it died; a Ray actor of a stopped run) is counted
    from its records in requests.jsonl, read back, so that the summary counts every record
    the run wrote, as it did when the driver counted each record as it came."""
    missing: list[WorkerState] = []
    for state in states:
        offset = state.clock.applied_ns if state.clock else 0
        if state.stats is None:
            missing.append(state)
            continue
        state.received = state.stats.total + state.stats.warmup  # every one sent before "done"
        state.measured = state.stats.total
        run.stats.merge(state.stats, offset)
        if run.groups is not None:
            for group, stats in (state.groups or {}).items():
                if group not in run.groups:
                    run.groups[group] = RunStats(run.config.percentiles)
                run.groups[group].merge(stats, offset)
    if missing:
        try:
            run.writer.flush()
            if any(state.appends for state in missing):  # killed, perhaps mid-write
                mend_torn_lines(run.writer.run_dir / REQUESTS)
            count_records_of(run, missing)
        except (OSError, OutputError):  # the file cannot be written or read back: the summary
            pass  # counts the other workers' statistics, workers_failed says who is missing


def count_records_of(run: _Run, states: list[WorkerState]) -> None:
    """The records of these workers' shares, read back from the run's requests.jsonl: counted
    in its statistics (each read by ``record_without_times``, else decoded whole) and in each
    worker's ``received``."""
    shares = [(s, s.share.indices if isinstance(s.share.indices, range)
               else set(s.share.indices)) for s in states]
    with open(run.writer.run_dir / REQUESTS, "rb") as lines:
        for line in lines:
            if not line.endswith(b"\n"):
                break  # a torn last line (a killed process): not a record
            index = _line_index(line)
            if index is not None and not any(index in indices for _, indices in shares):
                continue  # another worker's (or the warm-up's): counted already
            try:
                read = record_without_times(line)
                record, gaps = read or (RequestRecord.from_dict(orjson.loads(line)), None)
            except (ValueError, TypeError):  # not a record (this runs while the run ends:
                continue  # one bad line must not cost the summary)
            owner = next((state for state, indices in shares if record.index in indices), None)
            if owner is not None:
                run.count(record, gaps)
                owner.received += 1
                owner.measured += not record.warmup


_INDEX_KEY = b'{"index":'


def _line_index(line: bytes) -> int | None:
    """A record line's index, read off its start (``record_line`` writes it first), without
    decoding the rest; None where the line does not start so."""
    if line.startswith(_INDEX_KEY):
        end = line.find(b",", len(_INDEX_KEY))
        digits = line[len(_INDEX_KEY):end]
        if end > 0 and digits.isdigit():
            return int(digits)
    return None


def summed_prompt_figures(workers: list[dict[str, Any]]) -> dict[str, Any]:
    """Each worker built its own share's prompts: the counts and times add up."""
    out: dict[str, Any] = {}
    for w in workers:
        for key, value in (w.get("prompts") or {}).items():
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                out.setdefault(key, value)
            else:
                out[key] = out.get(key, 0) + value
    return out


def merged_client_figures(workers: list[dict[str, Any]], summary: dict[str, Any]) -> dict:
    """The client's own cost over all workers: CPU summed, the busiest worker's utilisation and
    the worst loop lag (the worst worker bounds the timestamp error), warnings per worker."""
    out_tokens = summary["tokens"]["output_total"]
    cpu = sum(w["cpu_s"] or 0.0 for w in workers)
    wall = max((w["wall_s"] or 0.0 for w in workers), default=0.0)
    util = max((w["cpu_utilization"] or 0.0 for w in workers), default=None)
    lags = [w["loop_lag_ms"] for w in workers if w.get("loop_lag_ms")]
    worst: dict[str, Any] = max(lags, key=lambda d: d.get("p99") or 0.0, default={})
    send = summary.get("send_lag_ms") or {}
    send_p99 = max((w["send_lag_p99_ms"] or 0.0 for w in workers), default=None)
    # the worker kept off the CPU longest (its share of its own wall time) bounds the others
    waited = max((w for w in workers if off_cpu_share(w) is not None),
                 key=lambda w: off_cpu_share(w) or 0.0, default=None)
    figures = {"cpu_s": cpu, "wall_s": wall, "cpu_utilization": util,
               "cpu_us_per_output_token": cpu / out_tokens * 1e6 if out_tokens else None,
               "loop_lag_ms": {k: worst.get(k) for k in ("p50", "p99")} if worst
               else distribution([], (50, 99)),
               "send_lag_p99_ms": send_p99 if send_p99 is not None else send.get("p99"),
               "event_loop": next((w["event_loop"] for w in workers if w.get("event_loop")), None),
               "stream_parser": next((w["stream_parser"] for w in workers
                                      if w.get("stream_parser")), None),
               "workers": len(workers)}
    if waited is not None:
        # its wait over the merged wall: the share says how much of the run the worst loop lost
        figures["run_queue_wait_s"] = (off_cpu_share(waited) or 0.0) * wall
    warnings = []
    for w in workers:
        if w.get("cpu_s") is None:
            continue
        one = {"cpu_utilization": w["cpu_utilization"], "loop_lag_ms": w["loop_lag_ms"],
               "send_lag_p99_ms": w["send_lag_p99_ms"], "wall_s": w["wall_s"],
               "run_queue_wait_s": w.get("run_queue_wait_s"), "cpu_s": w["cpu_s"],
               "prompts": w.get("prompts")}
        warnings += [f"worker {w['worker']}: {text}" for text in client_warnings(one, summary)]
    for w in workers:
        if w.get("error"):
            warnings.append(f"worker {w['worker']} did not finish: {w['error']}")
    figures["warnings"] = warnings
    return figures
