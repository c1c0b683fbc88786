"""``latscope compare`` through its CLI (``latscope.cli.main.main`` under capsys, not a tty):
the exit codes a CI gate reads, ``--json`` printing JSON and nothing else, a one-line error
(exit 2, never 1) for bad input, the compare run directory that ``latscope show`` re-prints,
every terminal line within 80 columns, and report.md / report.html that carry the same verdict,
the HTML self-contained and with any text from the runs escaped."""

from __future__ import annotations

import re

import orjson
import pytest
from rich.cells import cell_len

from compare_samples import write_run
from latscope.cli.main import main
from latscope.rundir import RunDir

HOSTILE = '<script>alert("x")</script>'


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("runs")
    return {"a": write_run(root / "a", seed=1), "b": write_run(root / "b", seed=2),
            "slow": write_run(root / "slow", seed=3, ttft_ms=80, queue_share=0.5, running=2,
                              waiting=6),
            "other": write_run(root / "other", seed=4, config={"input_len": "256"})}


def _run(capsys, *args):
    code = main(["compare", *map(str, args)])
    out, err = capsys.readouterr()
    return code, out, err


def test_exit_codes_for_ci(runs, tmp_path, capsys):
    assert _run(capsys, runs["a"], runs["b"], "-o", tmp_path / "same")[0] == 0
    code, out, _ = _run(capsys, runs["a"], runs["slow"], "-o", tmp_path / "slow")
    assert code == 1
    assert "REGRESSION (exit 1)" in out and "queueing" in out
    code, out, _ = _run(capsys, runs["a"], runs["other"], "-o", tmp_path / "other")
    assert code == 2 and "NOT COMPARABLE" in out and "--input-len" in out
    code, out, _ = _run(capsys, runs["a"], runs["b"], "--fail-on", "ttft_p99>+10%", "-o",
                        tmp_path / "p99")
    assert code == 2 and "INCONCLUSIVE" in out  # 200 requests: too short for a p99


def test_every_terminal_line_fits_80_columns(runs, tmp_path, capsys):
    _, out, _ = _run(capsys, runs["a"], runs["slow"], "-o", tmp_path / "w")
    too_wide = [line for line in out.splitlines() if cell_len(line) > 80]
    assert not too_wide, too_wide


def test_json_prints_only_the_comparison(runs, tmp_path, capsys):
    code, out, err = _run(capsys, runs["a"], runs["slow"], "--json", "-o", tmp_path / "j")
    data = orjson.loads(out)
    assert code == 1 and data["exit_code"] == 1 and data["status"] == "regression"
    assert {m["metric"] for m in data["metrics"]} >= {"ttft_mean", "ttft_p99", "throughput",
                                                      "errors"}
    assert "REGRESSION" in err  # the text went to stderr


@pytest.mark.parametrize("args, says", [
    (["{a}"], "give BASE and NEW"),
    (["{a}", "{b}", "--fail-on", "ttft<-1%"], "a rise"),
    (["{a}", "{b}", "--allow", "everything"], "groups are"),
    (["{a}", "/nonexistent/run"], "not a directory")])
def test_bad_input_is_one_line_and_exit_2_not_1(runs, capsys, args, says):
    code, out, err = _run(capsys, *[a.format(**runs) for a in args])
    assert code == 2
    assert err.startswith("error: ") and says in err and err.count("\n") == 1


def test_a_corrupt_requests_file_is_one_line_and_the_run_directory_says_failed(runs, tmp_path,
                                                                             capsys):
    broken = write_run(tmp_path / "broken", seed=5)
    lines = (broken / "requests.jsonl").read_bytes().splitlines(keepends=True)
    (broken / "requests.jsonl").write_bytes(lines[0] + b"garbage\n" + b"".join(lines[1:]))
    code, _, err = _run(capsys, runs["a"], broken, "-o", tmp_path / "out")
    assert code == 2 and "requests.jsonl:2: not a JSON line" in err
    assert RunDir.open(tmp_path / "out").manifest["status"].startswith("failed: ")


def test_the_run_directory_is_shown_again_and_the_reports_agree(runs, tmp_path, capsys):
    out_dir = tmp_path / "c"
    _, printed, _ = _run(capsys, runs["a"], runs["slow"], "-o", out_dir)
    run = RunDir.open(out_dir)
    assert run.kind == "compare" and run.manifest["exit_code"] == 1
    assert run.manifest["status"] == "ok" and "queueing" in run.manifest["verdict"]
    assert {f.id for f in run.read_findings()} >= {"compare.regression", "compare.layer_moved"}
    assert main(["show", str(out_dir)]) == 0
    shown = capsys.readouterr().out
    status = next(line for line in printed.splitlines() if line.startswith("REGRESSION"))
    assert status in shown
    md = (out_dir / "report.md").read_text()
    assert "REGRESSION (exit 1)" in md and "| TTFT mean |" in md
    html = (out_dir / "report.html").read_text()
    assert "<script" not in html and "default-src 'none'" in html
    assert html.count("<svg") >= 2  # the changes and the distributions (no timeseries here)


def test_text_from_the_runs_is_escaped_in_html(tmp_path, capsys):
    a = write_run(tmp_path / "a", seed=1, config={"input_len": HOSTILE})
    b = write_run(tmp_path / "b", seed=2)
    _run(capsys, a, b, "-o", tmp_path / "c")
    html = (tmp_path / "c" / "report.html").read_text()
    assert HOSTILE not in html and "&lt;script&gt;" in html
    assert not re.search(r"<script\b", html)


def test_sigterm_mid_comparison_says_interrupted_and_exits_130(runs, tmp_path, capsys,
                                                               monkeypatch):
    import os
    import signal

    from latscope.campaign import compare as campaign

    real = campaign.compare_runs

    def terminated(*args, **kwargs):
        os.kill(os.getpid(), signal.SIGTERM)  # a real signal, while comparing
        return real(*args, **kwargs)

    monkeypatch.setattr(campaign, "compare_runs", terminated)
    before = signal.getsignal(signal.SIGTERM)
    code, _, err = _run(capsys, runs["a"], runs["b"], "-o", tmp_path / "term")
    assert code == 130 and err.strip() == ("interrupted (SIGTERM): results gathered so far "
                                           "are on disk")
    assert RunDir.open(tmp_path / "term").manifest["status"] == "interrupted"
    assert signal.getsignal(signal.SIGTERM) is before  # the handler was put back
