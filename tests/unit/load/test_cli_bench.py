"""`latscope bench` end to end against the fake server, through the real CLI entry point."""

from __future__ import annotations

import json
import re

import pytest

from fakeserver import FakeServer

from latscope.cli.main import main
from latscope.load import BenchConfig


def test_bench_prints_table_and_writes_run(tmp_path, capsys):
    out = tmp_path / "run"
    with FakeServer(ttft_ms=5, itl_ms=1) as srv:
        rc = main(["bench", "--url", srv.url, "-n", "12", "-c", "3", "--output-len", "8",
                   "--slo", "ttft=1000", "--percentiles", "50,99.9", "--no-progress",
                   "--scrape-interval", "0", "--output-dir", str(out)])
    text = capsys.readouterr().out
    assert rc == 0
    for word in ("TTFT", "TPOT", "ITL", "E2E", "p99.9", "goodput", "requests/s"):
        assert word in text, word
    summary = json.loads((out / "summary.json").read_text())
    assert summary["requests"]["completed"] == 12 and summary["goodput"]["good_requests"] == 12
    lines = (out / "requests.jsonl").read_text().splitlines()
    assert sum('"warmup":false' in line for line in lines) == 12  # the stagger's ramp past them
    assert len(lines) == 12 + summary["requests"]["warmup_excluded"]
    assert re.search(r"concurrency 3 \(held [0-9.]+ on average\)", text)
    assert "of them the stagger's ramp" in text and summary["load"]["ramp_requests_excluded"]


def test_open_loop_rate_from_cli(tmp_path, capsys):
    out = tmp_path / "run"
    with FakeServer(ttft_ms=1, itl_ms=1) as srv:
        rc = main(["bench", "--url", srv.url, "-n", "20", "--rate", "200", "--burstiness", "0.5",
                   "--output-len", "2", "--no-progress", "--scrape-interval", "0",
                   "--output-dir", str(out)])
    assert rc == 0
    summary = json.loads((out / "summary.json").read_text())
    held = summary["load"].pop("mean_in_flight")
    assert summary["load"] == {"mode": "open", "concurrency": None, "rate": 200.0,
                               "burstiness": 0.5}
    assert 0 < held < 20  # what the open loop had in flight, on average
    assert "open loop 200 req/s" in capsys.readouterr().out


def test_unreachable_and_bad_flags_exit_1_with_one_line(tmp_path, capsys):
    rc = main(["bench", "--url", "http://127.0.0.1:9", "-n", "2", "--no-progress",
               "--output-dir", str(tmp_path / "a")])
    err = capsys.readouterr().err
    assert rc == 1 and err.startswith("error: cannot reach") and err.count("\n") == 1
    rc = main(["bench", "--url", "http://127.0.0.1:9", "--mix", "nonsense", "--no-progress"])
    assert rc == 1 and "NAME:WEIGHT:IN:OUT" in capsys.readouterr().err
    # numpy rejects a percentile > 100 only when the summary is made: refuse it before the run
    rc = main(["bench", "--url", "http://127.0.0.1:9", "--percentiles", "50,150", "--no-progress",
               "--output-dir", str(tmp_path / "b")])
    err = capsys.readouterr().err
    assert rc == 1 and err.startswith("error: percentiles") and err.count("\n") == 1


def test_mix_reports_each_group(tmp_path, capsys):
    out = tmp_path / "run"
    with FakeServer(ttft_ms=1, itl_ms=5) as srv:
        rc = main(["bench", "--url", srv.url, "-n", "40", "-c", "4", "--seed", "7",
                   "--mix", "short:0.7:8:2,long:0.3:64:6", "--no-progress",
                   "--scrape-interval", "0", "--output-dir", str(out)])
    assert rc == 0
    assert "By workload group" in capsys.readouterr().out
    groups = json.loads((out / "summary.json").read_text())["by_group"]
    assert set(groups) == {"short", "long"}
    assert sum(g["requests"]["completed"] for g in groups.values()) == 40
    # the long answers are 6 tokens (25 ms of ITL), the short ones 2 (5 ms): E2E must show it
    assert groups["long"]["e2e_ms"]["p50"] > groups["short"]["e2e_ms"]["p50"]


@pytest.mark.parametrize("changes, message", [
    ({"num_requests": -5}, "negative"),  # once: numpy "negative dimensions" traceback
    ({"num_requests": None, "duration_s": -2.0}, "negative"),  # once: an empty run, no error
    ({"warmup": -1}, "negative"),
    ({"request_timeout_s": 0.0}, "timeout"),  # once: every request failed as a timeout
    ({"percentiles": (50.0, 150.0)}, "percentiles"),  # once: ValueError after the whole run
])
def test_config_refuses_values_that_would_fail_later(changes, message):
    from latscope.errors import ConfigError
    from latscope.load import BenchConfig

    config = BenchConfig(url="http://127.0.0.1:9", num_requests=4, concurrency=1)
    for key, value in changes.items():
        setattr(config, key, value)
    with pytest.raises(ConfigError, match=message):
        config.validate()


@pytest.mark.parametrize("flags, says", [
    (["--rate", "nan"], "--rate nan: give a finite number"),
    (["--rate", "inf"], "--rate inf: give a finite number"),
    (["--duration", "nan"], "--duration nan: give a finite number"),
    (["--rate", "-2"], "--rate -2: must not be negative"),
    (["-c", "-4"], "--concurrency -4: must not be negative"),
    (["--warmup", "-1"], "--warmup -1: must not be negative"),
    (["--timeout", "nan"], "--timeout nan: give a finite number"),
])
def test_numeric_flags_refuse_nan_inf_and_negatives(flags, says, capsys):
    rc = main(["bench", "--url", "http://127.0.0.1:9", "-n", "1", *flags])
    err = capsys.readouterr().err
    assert rc == 1 and err.strip() == f"error: {says}", err


def test_other_verbs_refuse_them_too(capsys):
    assert main(["sweep", "--url", "http://127.0.0.1:9", "--factor", "nan"]) == 1
    assert "--factor nan: give a finite number" in capsys.readouterr().err


def test_the_library_refuses_a_nan_rate():
    from latscope.errors import ConfigError

    with pytest.raises(ConfigError, match="rate must be a finite number"):
        BenchConfig(url="http://127.0.0.1:9", rate=float("nan")).validate()
