"""The rules of ``latscope compare``: the --fail-on grammar, a verdict from an interval and a
tolerance, which differences refuse a comparison, the gate's exit code, and the layer named."""

from __future__ import annotations

import pytest

from latscope.analysis.compare_facts import Fact
from latscope.analysis.compare_metrics import Estimate, MetricSpec
from latscope.analysis.compare_model import LayerRow, MetricRow, StateRow
from latscope.analysis.compare_stats import Change
from latscope.errors import ConfigError
from latscope.findings.compare import differences, flag_difference, gate, judge
from latscope.findings.compare_layers import layer_sentence
from latscope.findings.compare_policy import DEFAULT_POLICY, parse_fail_on


def test_fail_on_terms_are_parsed_and_normalised():
    terms = parse_fail_on("ttft_p99>+10%, throughput<-5%,errors>1%,itl>20%")
    assert [(t.metric, t.tolerance) for t in terms] == [
        ("ttft_p99", 0.10), ("throughput", 0.05), ("errors", 0.01), ("itl_mean", 0.20)]
    assert [t.text for t in terms] == ["ttft_p99>+10%", "throughput<-5%", "errors>+1%",
                                       "itl_mean>+20%"]
    assert [t.text for t in parse_fail_on(None)] == DEFAULT_POLICY.split(",")
    assert parse_fail_on("none") == []


@pytest.mark.parametrize("text, says", [
    ("ttft_p99<-10%", "a rise"), ("throughput>+5%", "a fall"), ("ttft_p99>-10%", "sign"),
    ("ttft_p97>10%", "unknown metric"), ("ttft>0%", "above 0%"), ("ttft>>1", "expected"),
    ("ttft>1%,ttft_mean>2%", "named twice"), (",", "no term")])
def test_a_bad_fail_on_term_is_one_line_saying_why(text, says):
    with pytest.raises(ConfigError, match=says) as err:
        parse_fail_on(text)
    assert "\n" not in str(err.value)


def _estimate(lo, hi, *, metric="ttft_mean", higher=False, n=500, point=None):
    spec = MetricSpec(metric, metric, "ms", higher)
    mid = (lo + hi) / 2 if point is None else point
    return Estimate(spec, 100.0, 100.0 * (1 + mid), Change(mid, lo, hi), None, n, n)


@pytest.mark.parametrize("lo, hi, verdict, gate_word", [
    (0.12, 0.30, "regression", "fail"),      # all of it beyond +10%
    (0.05, 0.30, "inconclusive", "undecided"),  # reaches past +10%, not all beyond it
    (-0.05, 0.08, "no change", "pass"),
    (-0.40, 0.05, "inconclusive", "pass"),   # better or unchanged: no regression beyond 10%
    (-0.40, -0.15, "improvement", "pass")])
def test_a_verdict_weighs_the_interval_against_the_tolerance(lo, hi, verdict, gate_word):
    row = judge(_estimate(lo, hi), parse_fail_on("ttft_mean>+10%"))
    assert (row.verdict, row.gate) == (verdict, gate_word)


def test_a_fall_is_the_regression_of_a_throughput():
    terms = parse_fail_on("throughput<-5%")
    assert judge(_estimate(-0.30, -0.10, metric="throughput", higher=True),
                 terms).verdict == "regression"
    assert judge(_estimate(0.10, 0.30, metric="throughput", higher=True),
                 terms).verdict == "improvement"


def test_too_few_requests_for_a_tail_is_inconclusive_whatever_the_interval():
    row = judge(_estimate(0.5, 0.9, metric="ttft_p99", n=200), parse_fail_on("ttft_p99>+10%"))
    assert row.verdict == "inconclusive" and "needs 1000" in row.why


def _facts(**values):
    groups = {"workload.input_len": "workload", "model.name": "model",
              "server.version": "server", "hardware.gpu": "hardware", "hardware.cpus": "hardware",
              "workload.seed": "workload", "server.flags": "server"}
    return {k: Fact(k, k, v, groups[k]) for k, v in values.items()}


def test_workload_model_and_hardware_refuse_server_changes_are_listed():
    base = _facts(**{"workload.input_len": "128", "model.name": "m", "server.version": "0.10",
                     "hardware.gpu": "NVIDIA H200", "workload.seed": 1})
    new = _facts(**{"workload.input_len": "256", "model.name": "m", "server.version": "0.12",
                    "hardware.gpu": "NVIDIA H100", "workload.seed": 2})
    found = {d.key: d.action for d in differences([base], [new])}
    assert found == {"workload.input_len": "refuse", "hardware.gpu": "refuse",
                     "server.version": "list", "workload.seed": "list"}
    allowed = {d.key: d.action for d in differences([base], [new], frozenset({"hardware"}))}
    assert allowed["hardware.gpu"] == "caveat"


def test_a_fact_recorded_on_one_side_only_is_a_caveat_and_runs_of_a_side_that_disagree_listed():
    found = differences([_facts(**{"hardware.gpu": "NVIDIA H200"})], [_facts(**{"hardware.gpu":
                                                                               None})])
    assert [(d.action, d.new) for d in found] == [("caveat", "not recorded")]
    mixed = differences([_facts(**{"model.name": "a"}), _facts(**{"model.name": "b"})],
                        [_facts(**{"model.name": "a"})])
    assert mixed[0].action == "refuse" and "differs between runs" in mixed[0].base


def test_a_server_command_line_shows_only_the_flags_that_differ():
    a = "vllm serve m --port 8000 --max-num-seqs 256 --enforce-eager"
    b = "vllm serve m --port 8000 --max-num-seqs 64 --profiler-config '{\"a\": 1}'"
    assert flag_difference(a, b) == (
        "--max-num-seqs 256 --enforce-eager --profiler-config (not given)",
        "--max-num-seqs 64 --enforce-eager (not given) --profiler-config {\"a\": 1}")


def _row(metric, gate_word, verdict="no change"):
    return MetricRow(metric=metric, label=metric, unit="ms", higher_is_better=False,
                     relative=True, base=1.0, new=1.0, change=0.0, within=[-0.1, 0.1],
                     between=None, interval="within-run", tolerance=0.1, verdict=verdict,
                     gate=gate_word, why="")


def test_the_gate_exit_codes():
    assert gate([_row("a", "pass"), _row("b", "")], [])[:2] == ("no regression", 0)
    assert gate([_row("a", "fail", "regression"), _row("b", "undecided")], [])[1] == 1
    assert gate([_row("a", "pass"), _row("b", "undecided", "inconclusive")], [])[1] == 2
    refused = differences([_facts(**{"model.name": "a"})], [_facts(**{"model.name": "b"})])
    assert gate([_row("a", "fail", "regression")], refused)[:2] == ("not comparable", 2)


def test_the_layer_named_is_the_part_that_moved_with_the_gauges_that_say_why():
    metrics = [_row("ttft_mean", "fail", "regression")]
    metrics[0].label, metrics[0].change, metrics[0].within = "TTFT mean", 0.4, [0.3, 0.5]
    layers = [LayerRow(key="ttft", label="TTFT", total="ttft", base_ms=100.0, new_ms=141.0,
                       delta_ms=41.0, share=None),
              LayerRow(key="ttft.server.queue", label="queue", total="ttft", base_ms=2.0,
                       new_ms=40.0, delta_ms=38.0, share=38 / 41),
              LayerRow(key="ttft.server.prefill", label="prefill", total="ttft", base_ms=80.0,
                       new_ms=83.0, delta_ms=3.0, share=3 / 41)]
    state = [StateRow(key="running_queued", label="", base=8.0, new=2.0),
             StateRow(key="waiting_max", label="", base=1.0, new=14.0)]
    sentence, part = layer_sentence(layers, metrics, state)
    assert part is not None and part.key == "ttft.server.queue"
    assert sentence == ("TTFT mean +41 ms (+40%): +38 ms of it is queueing: running capped at "
                        "2 in NEW, 14 waiting (was 8)")
    metrics[0].within = [-0.1, 0.9]  # the total did not change beyond its interval
    assert layer_sentence(layers, metrics, state)[1] is None


def test_a_server_api_key_never_reaches_the_comparison(tmp_path):
    import orjson

    from latscope.analysis.compare_facts import read_load_run

    (tmp_path / "manifest.json").write_bytes(orjson.dumps(
        {"kind": "diagnose", "target": {"server_args": ["vllm", "serve", "m", "--api-key",
                                                        "sk-secret-123"]}}))
    (tmp_path / "step").mkdir()
    facts = read_load_run(tmp_path / "step", root=tmp_path).facts
    assert "sk-secret-123" not in facts["server.flags"].value
    assert "--api-key" in facts["server.flags"].value
