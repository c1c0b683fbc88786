"""diagnose's A/B of vLLM's priority policy, end to end on the local target: where queueing
dominates and request sizes spread, A is the server as it is (fcfs), B the server restarted with
--scheduling-policy priority behind a tagging gateway; the experiment reports its outcome with
intervals, and B's own log shows the policy it really ran with. The gain is not asserted (this
box's figures are in docs/gateway.md): the structure of the proof is."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from latscope.campaign.diagnose import DiagnoseOptions, diagnose
from latscope.gateway.tags import policy_from_log

pytestmark = [pytest.mark.integration, pytest.mark.slow]


@pytest.mark.xfail(strict=False, reason="#22: the histogram-window cause is fixed "
                   "(analysis.decompose counts late warm-ups on both sides); a second one is "
                   "open: on 2026-12-02 the 0.37 s c=8 step read the client's own loop lag "
                   "170 ms of a 126 ms TTFT (spans source), queue 8%, so no A/B fitted: the "
                   "load generator, not the server, limited that short step")
def test_diagnose_ab_of_the_priority_policy_with_tags(tmp_path):
    # 2 sequences at a time and c=8 make a queue; 90% short (32 in, 8 out), 10% long (512 in,
    # 128 out). The budget leaves room for the priority A/B's two pairs, none for the gateway's
    report = diagnose(DiagnoseOptions(serve_args=("--max-num-seqs", "2"), budget_s=210,
                                      loads=(1, 8), mix="short:0.9:32:8,long:0.1:512:128",
                                      output_dir=str(tmp_path / "run"), max_proofs=0, pairs=2))
    [exp] = [e for e in report["experiments"] if "--scheduling-policy priority" in e["change"]]
    assert exp["change"] == "--scheduling-policy priority + latscope gateway --policy tag"
    assert exp["measured"] is True and exp["metric"] == "short_ttft_mean_ms"
    assert exp["arms"] == ["A", "B", "A", "B"]
    assert exp["ci95_pct"] is not None and exp["ci95_pct"][0] <= exp["ci95_pct"][1]
    guards = {g["metric"]: g for g in exp["guards"]}
    assert set(guards) == {"long_e2e_mean_ms", "steady_rps"}
    assert all(g["ci95_pct"] is not None for g in guards.values()), guards
    assert exp["outcome"].startswith(("helped", "did not help", "made it worse"))
    assert exp["helped"] == (exp["ci95_pct"][1] < 0)
    assert ("proposal" in exp) == exp["outcome"].startswith("helped")
    # A ran as diagnose started it; B really ran with the priority policy (its log says so)
    assert exp["server_policy"] == {"A": "fcfs", "B": "priority"}
    b_logs = list((Path(report["run_dir"]) / "prove" / "priority" / "server-B").rglob("*.log"))
    assert b_logs and policy_from_log(b_logs[0]) == "priority"
    # the B runs went through the gateway, the A runs straight to the server
    configs = {d[-1]: json.loads((Path(d) / "manifest.json").read_text())["config"]
               for d in exp["run_dirs"]}
    assert configs["A"]["url"] != configs["B"]["url"]
    print("priority A/B:", exp["outcome"], exp["change_pct"], exp["ci95_pct"],
          {k: (g["change_pct"], g["ci95_pct"]) for k, g in guards.items()})
