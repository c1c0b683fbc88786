"""Prompts built as they are sent (latscope.load.promptsource): prompt k depends on the seed and
k alone, a run holds only the prompts just ahead of its sends, no index resends another's prompt,
and the server's own tokenizer is never asked during a run."""

from __future__ import annotations

import asyncio
import itertools
import pickle
import sys
from pathlib import Path

import pytest

from latscope.load import prepare, promptsource
from latscope.load.config import BenchConfig, WorkloadSpec, parse_mix
from latscope.load.promptsource import FixedPrompts, SyntheticPrompts
from latscope.load.runner import run_bench
from latscope.load.workers import run_workers
from latscope.load.workload import LocalTokenizer, WordTokenizer, build_workload
from latscope.rundir import read_run

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from fakeserver import FakeServer  # noqa: E402


def _mix_spec() -> WorkloadSpec:
    spec = WorkloadSpec()
    spec.input_len, spec.output_len = "20..60", "8"
    spec.prefix_len, spec.prefix_fraction = 12, 0.5
    return spec


def test_prompt_k_is_the_same_whoever_builds_it_and_in_whatever_order(tokenizer_dir):
    tok = LocalTokenizer(tokenizer_dir)
    spec = _mix_spec()
    forward = build_workload(spec, 40, tok, seed=3).prompts
    assert isinstance(forward, SyntheticPrompts)
    forward.prebuild(range(40))
    backward = build_workload(spec, 40, tok, seed=3).prompts
    backward.prebuild(reversed(range(40)))
    elsewhere = pickle.loads(pickle.dumps(backward))  # as a worker process gets it
    assert not elsewhere._ahead  # the recipe travels, not the driver's built prompts
    texts = [forward.take(k).text for k in range(40)]
    assert texts == [backward.take(k).text for k in range(40)]
    assert texts == [elsewhere[k].text for k in range(40)]
    assert len(set(texts)) == 40
    for k in range(40):  # exact lengths, and the shared prefix where drawn
        p = elsewhere[k]
        assert len(tok.encode(p.text)) == p.prompt_tokens and 20 <= p.prompt_tokens <= 60
    groups = {elsewhere[k].group for k in range(40)}
    assert groups == {"default", "shared_prefix"} == elsewhere.group_names()
    other_seed = build_workload(spec, 40, tok, seed=4).prompts
    assert [other_seed[k].text for k in range(40)] != texts


def test_a_long_run_holds_only_the_prompts_just_ahead_of_its_sends(monkeypatch):
    monkeypatch.setattr(promptsource, "_AHEAD_PROMPTS", 32)
    source = build_workload(WorkloadSpec(), 5000, WordTokenizer(), seed=1).prompts
    source.prebuild(itertools.count(), 5000)
    assert source.built_before_run == len(source._ahead) == 32
    peak = 0

    async def sends() -> None:
        nonlocal peak
        for k in range(2000):
            source.take(k)
            peak = max(peak, len(source._ahead))
            if k % 4 == 0:
                await asyncio.sleep(0)  # a quiet moment of the loop: building goes on there

    asyncio.run(sends())
    assert peak <= 32
    f = source.figures()
    assert f["built_during_run"] > 1500  # built in the loop's quiet moments, not in sends
    assert f["built_before_run"] + f["built_during_run"] + f["built_in_send"] >= 2000
    assert not any(k < 2000 for k in source._ahead)  # nothing sent is kept


def test_the_servers_tokenizer_builds_everything_before_the_run_and_resends_are_counted():
    with FakeServer(ttft_ms=0, itl_ms=0) as srv:
        from latscope.load.workload import ServerTokenizer

        tok = ServerTokenizer(srv.url, "fake-model", {})
        prompts = build_workload(WorkloadSpec(), 6, tok, seed=1).prompts
    assert isinstance(prompts, FixedPrompts) and len(prompts) == 6
    assert [prompts.take(k).text for k in range(8)][6:] == [prompts[0].text, prompts[1].text]
    assert prompts.figures()["resent"] == 2
    assert "resent" in prompts.notes()[0]


@pytest.mark.slow
def test_a_duration_closed_loop_never_resends_a_prompt(monkeypatch, tmp_path):
    monkeypatch.setattr(prepare, "_DURATION_POOL", 16)  # prompts built before: 16 + warm-up
    with FakeServer(ttft_ms=1, itl_ms=1, tokenize_mode="off") as srv:
        config = BenchConfig(url=srv.url, model="fake-model", duration_s=1.0, num_requests=None,
                             concurrency=4, warmup=4, output_dir=tmp_path / "run")
        config.workload.input_len, config.workload.output_len = "24", "4"
        result = run_bench(config)
        truth = srv.truth()
    sent = [t.prompt for t in truth.values()]
    assert len(sent) > 100  # far past the 20 built before the run
    assert len(set(sent)) == len(sent)
    figures = result.summary["client"]["prompts"]
    assert figures["built_as_sent"] and figures["built_before_run"] == 20
    assert figures["built_during_run"] + figures["built_in_send"] + 20 >= len(sent)
    assert result.manifest["workload"]["prompts"]["built_before_run"] == 20
    assert 0 < figures["build_during_run_s"] < result.summary["client"]["cpu_s"]


@pytest.mark.slow
def test_a_worker_builds_the_very_prompt_one_process_sends_for_each_index(tokenizer_dir,
                                                                           tmp_path):
    def config(out: str) -> BenchConfig:
        c = BenchConfig(url=srv.url, model="fake-model", num_requests=40, concurrency=4,
                        warmup=2, seed=9, output_dir=tmp_path / out)
        c.workload.input_len, c.workload.output_len = "16..40", "4"
        c.tokenizer = str(tokenizer_dir)
        return c

    with FakeServer(ttft_ms=1, itl_ms=1) as srv:
        one = run_bench(config("one"))
        by_index_one = {rid.rsplit("-", 1)[1]: t.prompt for rid, t in srv.truth().items()}
        srv.reset()
        two = run_workers(config("two"), 2)
        by_index_two = {rid.rsplit("-", 1)[1]: t.prompt for rid, t in srv.truth().items()}
    # every index a process sent has its own prompt, the same whichever process sent it (a
    # worker's indices are a stride of them: its stagger ramp's too)
    common = by_index_one.keys() & by_index_two.keys()
    assert len(common) >= 20 and all(by_index_one[k] == by_index_two[k] for k in common)
    for sent in (by_index_one, by_index_two):
        assert len(set(sent.values())) == len(sent) >= 42
    _, records, _ = read_run(two.run_dir)
    assert sum(not r.warmup for r in records) == 40
    assert len({r.index for r in records}) == len(records)
    # an -n run builds its prompts once, before it (the stagger ramp's with them), and none
    # past them
    for result in (one, two):
        built = result.summary["client"]["prompts"]
        assert built["built_in_send"] == 0 and built["built_during_run"] == 0
        assert built["built_before_run"] >= len(result.records)


def test_a_client_busy_building_prompts_is_told_so():
    from latscope.load.summary import client_warnings

    figures = {"cpu_utilization": 0.97, "cpu_s": 10.0,
               "prompts": {"build_during_run_s": 4.0, "built_during_run": 9000}}
    text = " ".join(client_warnings(figures, {}))
    assert "building prompts during the run took 4.0 s beside the client's 10.0 s" in text
    figures["prompts"]["build_during_run_s"] = 0.5  # 5%: not what held it back
    assert "building prompts" not in " ".join(client_warnings(figures, {}))


def test_the_manifest_counts_groups_only_where_every_prompt_was_built_before_the_run():
    spec = _mix_spec()
    prompts = build_workload(spec, 50, WordTokenizer(), seed=2).prompts
    prompts.prebuild(itertools.count(), 50)
    groups = prompts.groups_built()
    assert groups is not None and sum(groups.values()) == 50
    assert set(groups) <= prompts.group_names()
    longer = build_workload(spec, 50, WordTokenizer(), seed=2).prompts
    longer.prebuild(range(10), 10)  # a driver that builds only the warm-up
    assert longer.groups_built() is None


def test_a_size_seed_of_its_own_keeps_the_sizes_and_changes_only_the_texts():
    """Two runs with one size seed send requests of the same mix entries and lengths in the same
    order (an A/B pair: campaign.experiment), each with texts of its own (no prefix cache
    between them); another size seed draws other sizes."""
    spec = WorkloadSpec(mix=parse_mix("short:0.8:8..24:2..6,long:0.2:64..96:20..40"))
    spec.prefix_len, spec.prefix_fraction = 4, 0.3

    def prompts(seed: int, size_seed: int | None) -> list:
        built = build_workload(spec, 60, WordTokenizer(), seed=seed, size_seed=size_seed).prompts
        return [built[k] for k in range(60)]

    def sizes(run: list) -> list[tuple]:
        return [(p.group, p.prompt_tokens, p.output_tokens) for p in run]

    a, b = prompts(11, size_seed=7), prompts(12, size_seed=7)
    assert sizes(a) == sizes(b)
    assert {p.group for p in a} == {"short", "long", "short+shared_prefix", "long+shared_prefix"}
    assert not {p.text for p in a} & {p.text for p in b}  # nothing for a prefix cache to serve
    assert sizes(prompts(11, size_seed=8)) != sizes(a)
    # without one the seed draws both, as before: the same seed, the same prompts
    assert [p.text for p in prompts(11, None)] == [p.text for p in prompts(11, None)]
    assert sizes(prompts(11, None)) != sizes(prompts(12, None))
