"""No run resends another's prompts: a sweep's steps, a campaign's runs and two campaigns each
send prompts of their own (with one seed for every step, each step resent the one before's and a
server's prefix cache served every later step); where a server had seen a run's prompts anyway
(the same --seed twice), the run says so."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from fakeserver import FakeServer
from latscope.campaign.experiment import arm_seed
from latscope.campaign.observe import with_load
from latscope.campaign.state import Diagnosis
from latscope.campaign.sweep import step_seed
from latscope.cli.main import main
from latscope.findings.servermetrics import resent_prompts
from latscope.load import BenchConfig
from latscope.model import Severity


@pytest.mark.slow
def test_every_sweep_step_sends_prompts_of_its_own(tmp_path):
    out = tmp_path / "sweep"
    with FakeServer(ttft_ms=2, itl_ms=1) as srv:
        assert main(["sweep", "--url", srv.url, "--concurrency", "1,2,4", "-n", "20",
                     "--input-len", "16", "--output-len", "4", "-o", str(out)]) == 0
        sent = [t.prompt for t in srv.truth().values()]
    assert len(sent) >= 60 and len(set(sent)) == len(sent)  # warm-ups included
    seeds = [json.loads(m.read_text())["config"]["seed"] for m in out.glob("step-*/manifest.json")]
    assert len(seeds) == 3 == len(set(seeds))


def test_a_steps_seed_follows_the_sweep_seed_the_mode_and_the_load():
    assert step_seed(0, "concurrency", 8) == step_seed(0, "concurrency", 8)  # tune's trials
    others = {step_seed(0, "concurrency", 16), step_seed(1, "concurrency", 8),
              step_seed(0, "rate", 8), step_seed(0, "rate", 8.5)}
    assert len(others) == 4 and step_seed(0, "concurrency", 8) not in others


def test_a_campaigns_runs_draw_their_seeds_from_the_campaigns():
    def seeds(campaign_seed: int) -> list[int]:
        base = BenchConfig(url="http://127.0.0.1:1", seed=campaign_seed)
        return [with_load(base, concurrency=1, num_requests=4, output_dir=Path("x"), warmup=0,
                          seed=n).seed for n in (100, 101, 900)]

    assert seeds(5) == seeds(5) and len(set(seeds(5))) == 3
    assert not set(seeds(5)) & set(seeds(6))  # another campaign: other prompts
    draw = {f.name: f for f in dataclasses.fields(Diagnosis)}["prompt_seed"].default_factory
    assert draw() != draw()  # type: ignore[misc]  # each diagnose its own campaign seed


def test_a_run_served_from_the_cache_though_its_prompts_share_nothing_is_flagged():
    found = resent_prompts(0.38, shares_prefix=False, seed=0, source="/metrics over the run")
    assert [(f.id, f.severity) for f in found] == [("server.prefix_cache_resent", Severity.WARNING)]
    assert found[0].title.startswith("38% of this run's prompt tokens came from the prefix cache")
    assert resent_prompts(0.04, shares_prefix=False, seed=0, source="s") == []
    assert resent_prompts(0.9, shares_prefix=True, seed=0, source="s") == []  # a shared prefix
    assert resent_prompts(None, shares_prefix=False, seed=0, source="s") == []  # no metrics


def test_every_ab_run_of_a_campaign_has_prompts_of_its_own():
    # each experiment once counted from one seed: the gateway A/B's A runs resent the priority
    # A/B's A prompts to the same server, and 23% of them came from its prefix cache (B: 0%)
    experiments = [Path("prove/gateway"), Path("prove/priority"),
                   Path("prove/server_queue_max_num_seqs")]
    seeds = [arm_seed(d, pair, arm, attempt) for d in experiments for pair in range(4)
             for arm in "AB" for attempt in range(2)]
    assert len(set(seeds)) == len(seeds)
    assert arm_seed(Path("a/gateway"), 1, "B", 0) == arm_seed(Path("b/gateway"), 1, "B", 0)


@pytest.mark.slow
def test_the_runs_of_an_ab_pair_send_the_same_sizes_with_texts_of_their_own(tmp_path):
    """Under a spread mix a run's mean moves with how many long requests it drew: both runs of
    a pair draw the same sizes in the same order (and so compare the fix, not the draw), each
    with prompts of its own; pairs draw sizes of their own, as separate runs would."""
    from abresults import gateway_ab  # tests/

    from latscope.load import read_run

    with FakeServer(ttft_ms=2, itl_ms=1) as server:
        exp = gateway_ab(server.url, "short:0.8:8..16:4,long:0.2:48..64:12..20", tmp_path,
                         requests=40, warmup=4)
        sent = [t.prompt for t in server.truth().values()]
    assert len(sent) >= 4 * 44 and len(set(sent)) == len(sent)  # every prompt its own

    def sizes(run_dir: str) -> dict[int, tuple]:
        """Each request's size by its index (a run's stagger ramp may add a warm-up request
        or two, so its measured ones start an index later: the sizes of an index still match)."""
        return {r.index: (r.group, r.prompt_tokens, r.expected_output_tokens)
                for r in read_run(Path(run_dir))[1]}

    a1, b1, a2, b2 = (sizes(d) for d in exp.ab_result().run_dirs)  # re-runs included
    for a, b in ((a1, b1), (a2, b2)):
        both = a.keys() & b.keys()
        assert len(both) >= 42 and all(a[k] == b[k] for k in both)
    assert [a1[k] for k in range(44)] != [a2[k] for k in range(44)]
    assert {g for g, _, _ in a1.values()} == {"short", "long"}
