"""The auto sweep's plan (grow, stop early, bisect at the knee) on analytic server curves."""

from __future__ import annotations

from pathlib import Path

import pytest

from latscope.analysis.knee import parse_slo
from latscope.errors import ConfigError
from latscope.analysis.sweep import (
    Step,
    StopRules,
    analyse,
    flatten_summary,
    refine_candidates,
    run_sweep,
    stop_reason,
)


def littles_law_server(capacity_rps=40.0, single_s=0.1, collapse_after=None):
    """Closed loop against a fixed-capacity server: X = min(c/L0, cap), E2E = c / X (Little's law).

    With ``collapse_after`` throughput falls by half past that concurrency (as the H200 did past
    256), which an early stop must notice.
    """
    def measure(load, phase):
        x = min(load / single_s, capacity_rps)
        if collapse_after and load > collapse_after:
            x /= 2
        e2e = 1000.0 * load / x
        return Step(load, {"requests_per_s": x, "e2e_p50_ms": e2e, "e2e_p99_ms": 1.5 * e2e,
                           "error_rate": 0.0},
                    decomposition={"ttft.server.queue": max(0.0, e2e - 1000 * single_s),
                                   "ttft.server.prefill": 20.0, "e2e.decode": 80.0})
    return measure


def test_auto_grows_stops_at_saturation_and_refines_near_knee():
    # c* = 40 req/s * 0.1 s = 4; loads 1, 2, 4, 8 then stop (8 gives no more throughput).
    seen = []
    steps = run_sweep(littles_law_server(), None, refine=2, on_step=lambda s: seen.append(len(s)))
    # 8 and 16 give no more throughput than 4: two stalled steps (patience 2) stop the growth.
    grow = [s for s in steps if s.phase == "grow"]
    assert [s.load for s in grow] == [1, 2, 4, 8, 16]
    assert "for 2 step(s)" in grow[-1].stop_reason
    # Refinement measured the integer geometric midpoints on both sides of the knee at 4.
    assert sorted(s.load for s in steps if s.phase == "refine") == [3, 6]
    assert seen == list(range(1, len(steps) + 1))  # on_step after every step, refinements too
    result = analyse(steps, [])
    assert result.knee.load == 4
    assert result.recommended == 3  # floor(0.9 * 4)


def test_fixed_grid_would_take_more_steps_than_auto():
    grid = [1, 2, 4, 8, 16, 32, 64, 128]
    full = run_sweep(littles_law_server(), grid, rules=StopRules(max_error_rate=1.0))
    auto = run_sweep(littles_law_server(), None, refine=0)
    # The list also stops early once throughput stops growing: both find c* = 4.
    assert analyse(full, []).knee.load == analyse(auto, []).knee.load == 4
    assert len(auto) < len(grid)


def test_throughput_collapse_stops_the_sweep_and_knee_is_before_it():
    measure = littles_law_server(capacity_rps=1000, single_s=0.1, collapse_after=64)
    steps = run_sweep(measure, None, refine=0, rules=StopRules(max_load=4096))
    assert max(s.load for s in steps) == 128
    assert "fell" in steps[-1].stop_reason
    assert analyse(steps, []).knee.load == 64


def test_small_integer_growth_factor_still_advances_and_bad_factor_is_refused():
    steps = run_sweep(littles_law_server(), None, factor=1.2, refine=0)
    assert [s.load for s in steps] == [1, 2, 3, 4, 5, 6]  # round(1 * 1.2) would repeat 1 forever
    with pytest.raises(ConfigError):
        run_sweep(littles_law_server(), None, factor=1.0)


def test_one_noisy_dip_does_not_stop_the_sweep_but_a_collapse_does():
    mk = lambda load, thr: Step(load, {"requests_per_s": thr, "error_rate": 0.0})  # noqa: E731
    rules = StopRules()
    # Recorded on the shared 2-core box: 4.18 req/s at c=1, 3.75 at c=2 (-10%, noise).
    assert stop_reason([mk(1, 4.18), mk(2, 3.75)], rules) == ""
    assert "for 2 step(s)" in stop_reason([mk(1, 4.18), mk(2, 3.75), mk(4, 4.3)], rules)
    assert stop_reason([mk(1, 4.18), mk(2, 3.75), mk(4, 6.0)], rules) == ""  # it grew again
    # H200, issue 7: 43.9 req/s at 256, 30.2 at 512 (-31%): stop at once.
    assert "fell 31%" in stop_reason([mk(128, 33.1), mk(256, 43.9), mk(512, 30.2)], rules)


def test_error_rate_and_latency_cap_stop_the_sweep():
    mk = lambda err, p99: Step(1, {"error_rate": err, "e2e_p99_ms": p99, "requests_per_s": 1})  # noqa: E731
    rules = StopRules(max_error_rate=0.05, latency_cap=parse_slo("e2e_p99_ms<=1000")[0])
    assert "error rate" in stop_reason([mk(0.2, 10)], rules)
    assert "latency cap" in stop_reason([mk(0.0, 5000)], rules)
    assert stop_reason([mk(0.0, 10)], rules) == ""


def test_slo_limits_the_recommendation_and_growth_is_attributed():
    steps = run_sweep(littles_law_server(), None, refine=0)
    # E2E p99 = 1.5 * c / X s: 150 ms at c<=4, 300 ms at c=8.
    result = analyse(steps, parse_slo("e2e_p99_ms<=160"))
    assert result.slo_load == 4 and result.slo_monotone
    assert result.recommended == 3
    # From c=4 to c=8 only queueing grows (the model's prefill and decode are constant).
    assert list(result.grows_at_knee)[0] == "ttft.server.queue"
    assert result.grows_at_knee["ttft.server.queue"] == pytest.approx(100.0)
    assert result.grows_at_knee["ttft.server.prefill"] == 0


def test_refine_candidates_are_geometric_midpoints_widest_gap_first():
    steps = [Step(l, {}) for l in (1, 4, 8, 64)]
    assert refine_candidates(steps, 8, integer=True) == [23, 6]  # sqrt(8*64), sqrt(4*8)
    assert refine_candidates([Step(1, {}), Step(2, {})], 2, integer=True) == []


def test_flatten_summary_names_slo_keys():
    from latscope.runfiles import summary_of

    rates = {"requests_per_s": 2.0, "output_tokens_per_s": 20.0, "total_tokens_per_s": 40.0,
             "window_s": 1.5, "window": "steady: first measured send to last send"}
    summary = {"ttft_ms": {"count": 3, "p99": 12.0, "mean": 5.0},
               "throughput": {**rates, "window_requests": 3,
                              "overall": {**rates, "requests_per_s": 1.5, "window": "all"}},
               "requests": {"total": 4, "completed": 3, "failed": 1}, "duration_s": 2.0,
               "tokens": {"input_total": 40, "output_total": 30}}
    flat = flatten_summary(summary_of(summary))
    assert flat["ttft_p99_ms"] == 12.0 and flat["ttft_mean_ms"] == 5.0
    assert flat["requests_per_s"] == 2.0 and flat["error_rate"] == 0.25
    assert flat["window_requests"] == 3 and flat["overall_requests_per_s"] == 1.5
    assert "window" not in flat and "overall_window_requests" not in flat  # not metrics


@pytest.mark.slow
def test_interrupted_sweep_keeps_measured_steps_on_disk(tmp_path):
    import json
    import signal
    import subprocess
    import sys
    import time

    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
    from fakeserver import FakeServer

    out = tmp_path / "sweep"
    with FakeServer(ttft_ms=5, itl_ms=2) as server:
        proc = subprocess.Popen([sys.executable, "-m", "latscope", "sweep", "--url", server.url,
                                 "--concurrency", "1,2,4,8,16,32,64", "-n", "40", "--input-len", "8",
                                 "--output-len", "16", "-o", str(out)],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and proc.poll() is None:
            if (out / "sweep.json").exists() and len(json.loads((out / "sweep.json").read_text())["steps"]) >= 2:
                break
            time.sleep(0.05)
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    assert "results gathered so far are on disk" in err
    doc = json.loads((out / "sweep.json").read_text())
    assert [s["load"] for s in doc["steps"]][:2] == [1, 2]
    assert all(Path(s["run_dir"]).is_dir() for s in doc["steps"])


@pytest.mark.parametrize("extra, message", [
    (["--backoff", "1.5"], "--backoff"),
    (["--backoff", "-0.1"], "--backoff"),
    (["--scrape-interval", "0"], "--scrape-interval"),
    (["--concurrency", "1.5,3"], "whole numbers"),
    (["--max-steps", "0"], "--max-steps"),
    (["--start", "1.5"], "whole numbers"),
])
def test_sweep_bad_flag_values_fail_before_any_step(tmp_path, capsys, extra, message):
    from latscope.cli.main import main

    # port 9 (discard) is closed here: reaching it would print "cannot reach", not the flag error
    assert main(["sweep", "--url", "http://127.0.0.1:9", "-o", str(tmp_path / "s"), *extra]) == 1
    err = capsys.readouterr().err
    assert err.startswith("error: ") and message in err
    assert not list((tmp_path / "s").glob("step-*"))


def test_show_marks_the_steps_the_sweep_marked_its_slo_included(tmp_path, capsys):
    import sys

    from latscope.cli.main import main

    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
    from fakeserver import FakeServer

    out = tmp_path / "sweep"
    with FakeServer(ttft_ms=5, itl_ms=1) as server:  # TTFT flat: the SLO holds at every step
        assert main(["sweep", "--url", server.url, "--concurrency", "1,2,4", "-n", "8",
                     "--input-len", "8", "--output-len", "4", "--slo", "ttft_p99_ms<=2000",
                     "-o", str(out)]) == 0
    live = capsys.readouterr().out
    assert main(["show", str(out)]) == 0
    shown = capsys.readouterr().out

    def marked(text: str) -> list[str]:
        return [line.split()[0] for line in text.splitlines() if "SLO max" in line]

    assert marked(live) == ["4"]  # the highest load meeting the SLO
    assert marked(shown) == marked(live)  # show renders what the sweep recorded

    # a sweep.json this version did not write is refused in one line, not a traceback
    import json

    doc = json.loads((out / "sweep.json").read_text())
    doc["analysis"]["knee"] = 5
    (out / "sweep.json").write_text(json.dumps(doc))
    assert main(["show", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and "sweep.json: not a sweep latscope wrote" in err
    assert "Traceback" not in err
