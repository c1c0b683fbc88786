"""A load run's summary: the RunStats figures plus what a bench run adds, its warnings, and the
summary rebuilt from disk for a run that ended without one."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from latscope.reliability import level, off_cpu_share  # noqa: F401 -- off_cpu_share: load's API
from latscope.rundir import iter_records_with_gaps, read_meta
from latscope.stats import RunStats, distribution

_GROUP_KEYS = ("requests", "errors", "ttft_ms", "tpot_ms", "e2e_ms")


def compose_summary(summary: dict[str, Any], config: dict[str, Any], model: str | None,
                    workload: dict[str, Any], by_group: dict[str, dict[str, Any]],
                    client: dict[str, Any], stats: RunStats) -> dict[str, Any]:
    """The RunStats summary plus what a bench run adds: load, workload, groups, the client."""
    rate = config.get("rate")
    summary["model"], summary["endpoint"] = model, config.get("endpoint")
    summary["stream"] = config.get("stream")
    summary["load"] = {"mode": "closed" if rate is None else "open",
                       "concurrency": config.get("concurrency"), "rate": rate,
                       "burstiness": config.get("burstiness") if rate else None,
                       # what the load held: requests in flight on average over the steady
                       # window, beside the concurrency asked
                       "mean_in_flight": (summary.get("throughput") or {}).get("mean_in_flight")}
    summary["workload"] = workload
    summary["by_group"] = {name: {k: v for k, v in s.items() if k in _GROUP_KEYS}
                           for name, s in by_group.items()}
    out_tokens = summary["tokens"]["output_total"]
    cpu_s = client.get("cpu_s")
    client["cpu_us_per_output_token"] = (cpu_s / out_tokens * 1e6 if cpu_s is not None
                                         and out_tokens else None)
    # p99 of send lag for the warning, whatever --percentiles the summary was asked for
    client["send_lag_p99_ms"] = distribution(stats.values_ms("send_lag"), (99,))["p99"]
    client["warnings"] = client_warnings(client, summary)
    summary["client"] = client
    return summary


def client_warnings(figures: dict[str, Any], summary: dict[str, Any]) -> list[str]:
    """Bench's warnings about its own client, at the ``warn`` levels of the one table of them
    (``latscope.reliability``; diagnose's judgement reads its ``unreliable`` levels)."""
    warnings = []
    util = figures.get("cpu_utilization") or 0.0
    if util > level("cpu_utilization", "warn"):
        warnings.append(f"client used {util:.0%} of a CPU core: it may be the bottleneck; "
                        "latencies include client delay")
        if figures.get("stream_parser") == "python":
            warnings.append("the client read streams in pure Python: latscope was installed "
                            "without a C compiler; installed with one (cc), its C stream pass "
                            "takes 3.5-4x less CPU per token (docs/bench.md)")
        building = (figures.get("prompts") or {}).get("build_during_run_s") or 0.0
        cpu = figures.get("cpu_s") or 0.0
        # seconds, not a share: the building may begin in the warm-up, outside the CPU window
        if cpu and building > 0.1 * cpu:
            warnings.append(f"building prompts during the run took {building:.1f} s beside the "
                            f"client's {cpu:.1f} s of CPU in the run (a long run of long prompts, "
                            "each tokenized until exact): fewer or shorter prompts, or --workers")
    off_cpu = off_cpu_share(figures) or 0.0
    if off_cpu > level("off_cpu_share", "warn"):
        warnings.append(f"the client's event loop waited for a CPU {off_cpu:.0%} of the run "
                        "(run-queue wait, /proc/thread-self/schedstat): other processes held "
                        "its cores, and its timestamps may be late")
    lag_p99 = (figures.get("loop_lag_ms") or {}).get("p99") or 0.0
    if lag_p99 > level("loop_lag_p99_ms", "warn"):
        warnings.append(f"event-loop lag p99 {lag_p99:.1f} ms: timestamps may be late by that much")
    send_p99 = figures.get("send_lag_p99_ms") or 0.0
    ttft_p50 = (summary.get("ttft_ms") or {}).get("p50") or (summary.get("e2e_ms") or {}).get(
        "p50") or 0.0
    # large = over 5 ms, or over 1 ms and a tenth of the typical latency
    if send_p99 > level("send_lag_p99_ms", "warn") or (
            send_p99 > level("send_lag_p99_ms_small", "warn")
            and send_p99 > level("send_lag_p99_per_ttft_p50", "warn") * ttft_p50):
        if summary.get("latency_origin") == "sent":
            where = "not counted in TTFT/E2E (closed loop: latency starts at the send)"
        else:
            where = "counted in TTFT/E2E (open loop: latency starts at the schedule)"
        warnings.append(f"send lag p99 {send_p99:.1f} ms: requests left later than "
                        f"scheduled; {where}")
    return warnings


RAMP_NOTE = ("the stagger's ramp (the sends before every slot had sent its first request: fewer "
             "than the concurrency asked in flight) is excluded like a warm-up; the statistics "
             "cover the window in which the concurrency asked is held")


def add_staggers(summary: dict[str, Any], staggers: list[dict[str, Any]]) -> None:
    """What a run's closed loops drew (``Stagger.describe``), and the requests of their ramps
    left out of the statistics (warm-up requests: ``requests.warmup_excluded`` counts them)."""
    if not staggers:  # open loops
        return
    load = summary["load"]
    load["stagger"] = staggers
    ramp = sum(s.get("ramp_requests") or 0 for s in staggers if s.get("phase") == "measured")
    load["ramp_requests_excluded"] = ramp
    if ramp:
        load["ramp_note"] = RAMP_NOTE


def rebuild_summary(run_dir: str | Path) -> dict[str, Any]:
    """A run's summary recomputed from ``requests.jsonl`` and ``manifest.json`` alone: for a run
    that was killed (SIGKILL, a crash) before it wrote ``summary.json``. What only the live run
    knew (client CPU, event-loop lag, per-group figures) is left out, and the summary says so.
    The records are read one line at a time, their token times as ITL gaps read where they lie
    (``iter_records_with_gaps``): it holds the statistics (bytes a request), never the
    records."""
    manifest, _ = read_meta(run_dir)
    config = manifest.get("config") or {}
    stats = RunStats(config.get("percentiles") or (50, 90, 95, 99), config.get("slo"))
    for record, gaps in iter_records_with_gaps(run_dir):
        stats.add(record, gaps)
    client: dict[str, Any] = {"cpu_s": None, "wall_s": None, "cpu_utilization": None,
                              "loop_lag_ms": {}, "run_queue_wait_s": None, "event_loop": None}
    summary = compose_summary(stats.summary(), config, manifest.get("model"),
                              manifest.get("workload") or {}, {}, client, stats)
    add_staggers(summary, manifest.get("stagger") or [])
    summary["rebuilt"] = ("from requests.jsonl after the run ended without a summary: client "
                          "CPU, event-loop lag and per-group figures are not known")
    return summary


def run_failure(summary: dict[str, Any]) -> str | None:
    """Why a finished run counts as failed (no request measured, or none completed), else None.
    The CLI prints it as its error line and exits non-zero."""
    requests = summary.get("requests") or {}
    total = requests.get("total") or 0
    if not total:
        return "no request was measured"
    if requests.get("completed"):
        return None
    errors = summary.get("errors") or {}
    kinds = ", ".join(f"{kind} {n}" for kind, n in sorted(errors.items(), key=lambda e: -e[1]))
    example = next(iter((summary.get("error_examples") or {}).values()), "")
    line = f"all {total} requests failed ({kinds})"
    return f"{line}; first: {example}" if example else line
