"""Terminal output read in an 80-column terminal or a log file (stdout not a tty): every line fits,
kernel names and decomposition rows stay whole on one line, sources are numbered notes.

Golden-free: these assert properties of the text (width, one row per line, what a row names),
never the exact text. Renderers run on the real fixtures and on built objects; the CLI runs
through ``latscope.cli.main.main`` under capsys, which is not a tty.
"""

from __future__ import annotations

import re
from collections import Counter
import os
from pathlib import Path

import orjson
import pytest
from rich.cells import cell_len

from fakeserver import FakeServer
from latscope.analysis.decompose import Component, Decomposition
from latscope.analysis.sweep import Step, analyse
from latscope.analysis.tune import Trial
from latscope.cli.main import main
from latscope.model import Evidence, Finding, Severity
from latscope.findings.impact import IMPACT_TARGETS, describe
from latscope.report.findings import findings_table
from latscope.report.observe import decomposition_notes, decomposition_table
from latscope.report.sweep import sweep_table, trials_table
from latscope.report.text import make_console
from latscope.report.trace import comparison_tables, top_kernels_table
from latscope.trace.analyze import analyze_trace
from latscope.trace.results import TraceAnalysis
from latscope.trace.compare import compare_results
from latscope.trace.names import (kernel_name_forms, short_event_name, short_kernel_name,
                                  short_kernel_names)
from latscope.trace.readers import read_trace
from latscope.trace.taxonomy import classify_names

# where tests/conftest.py looks for them ($LATSCOPE_FIXTURES, else ../shared/fixtures)
_FIXTURES = Path(os.environ.get("LATSCOPE_FIXTURES")
                 or Path(__file__).resolve().parents[3].parent / "shared" / "fixtures")
TRACES = sorted(p.name for p in (_FIXTURES / "traces").glob("*.gz"))
_cache: dict[str, dict] = {}


@pytest.fixture(autouse=True)
def _log_file_console(monkeypatch):
    """As in ``latscope trace x > out.txt``: no COLUMNS, whatever the terminal around."""
    monkeypatch.delenv("COLUMNS", raising=False)
    monkeypatch.delenv("FORCE_COLOR", raising=False)


def _analysed(fixtures_dir: Path, name: str) -> TraceAnalysis:
    if name not in _cache:
        _cache[name] = analyze_trace(read_trace(fixtures_dir / "traces" / name))
    return _cache[name]


def _render(renderable, width: int = 80) -> list[str]:
    console = make_console()
    console.width = width
    with console.capture() as cap:
        console.print(renderable)
    return cap.get().splitlines()


def _assert_fits(lines: list[str], width: int = 80) -> None:
    wide = [(cell_len(line), line) for line in lines if cell_len(line) > width]
    assert not wide, f"{len(wide)} lines wider than {width}: {wide[:3]}"


# --- short kernel names ----------------------------------------------------------------------

VEC = ("void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>, "
       "std::array<char*, 1ul> >(int, at::native::FillFunctor<float>, std::array<char*, 1ul>)")
FLASH = ("void cutlass::device_kernel<flash::FlashAttnFwdSm90<flash::CollectiveMainloopFwdSm90<2, "
         "cute::tuple<cute::C<1>, cute::C<1>, cute::C<1> >, cute::tuple<cute::C<128>, cute::C<128>,"
         " cute::C<128> >, 128, cutlass::bfloat16_t, float, cutlass::arch::Sm90, true, false>, "
         "flash::CollectiveEpilogueFwd<cute::tuple<cute::C<128>, cute::C<128> >, "
         "cutlass::bfloat16_t, cutlass::arch::Sm90, 256, true>, "
         "flash::VarlenDynamicPersistentTileScheduler<128, 256, 128, false, true> > >"
         "(flash::FlashAttnFwdSm90<int>::Params)")
NVJET = "nvjet_sm90_tst_192x192_64x4_2x1_v_bz_coopB_TNN"  # top kernel of a real H200 vLLM trace


def test_template_arguments_and_parameters_are_elided():
    short = short_kernel_name(VEC, 48)
    assert len(short) <= 48 and "vectorized_elementwise_kernel<" in short
    assert "(" not in short and not short.startswith("void ") and "…" in short


def test_wrapper_kernels_keep_what_they_wrap():
    for width in (30, 48, 80):
        short = short_kernel_name(FLASH, width)
        assert "FlashAttnFwdSm90" in short and len(short) <= width, short


def test_plain_names_that_fit_stay_whole():
    assert short_kernel_name(NVJET, 48) == NVJET
    assert short_kernel_name("saxpy(double *, double *, double *, double, int)", 48) == "saxpy"
    assert short_kernel_name("Memcpy HtoD (Pinned -> Device)", 48) == "Memcpy HtoD (Pinned -> Device)"


def test_too_long_plain_names_are_cut_in_the_middle():
    name = "bmm_MxE4m3_MxE2m1MxE4m3_Fp32_t128x16x256u2_s3_et128x16_m128x16x32_cga1x1x1_sm100f"
    short = short_kernel_name(name, 40)
    assert len(short) == 40 and short.startswith("bmm_MxE4m3") and short.endswith("sm100f")


def test_mangled_names_without_a_demangler_show_their_nested_name():
    name = "_ZN5aiter24add_rmsnorm_quant_kernelIDF16bDF16bLi64ELi8ELb0EEEvPT0_PT_Pfdiiib"
    assert short_kernel_name(name, 48).startswith("aiter::add_rmsnorm_quant_kernel<")


@pytest.mark.slow
def test_every_fixture_kernel_name_fits_one_line(fixtures_dir):
    names: set[str] = set()
    for trace in TRACES:
        events = read_trace(fixtures_dir / "traces" / trace)
        names.update(events.names[i] for i in set(events.gpu.name.tolist()))
    display = classify_names(sorted(names), "any").display
    assert len(display) > 200  # the fixtures hold hundreds of distinct kernels
    for width in (24, 48, 80):
        for name in display:
            short = short_kernel_name(name, width)
            assert len(short) <= width and "\n" not in short and short.strip(), (width, name)


@pytest.mark.parametrize("trace", TRACES)
def test_short_names_of_one_table_stay_apart(fixtures_dir, trace, capsys):
    collisions = {}
    for width in (30, 48):
        clashes = 0
        for dev in _analysed(fixtures_dir, trace).devices:
            names = [k.name for k in dev.kernels.top]
            short = short_kernel_names(names, width)
            assert all(len(s) <= width for s in short)
            by_short = Counter(short)
            clashes += sum(n - 1 for n in by_short.values() if n > 1)
        collisions[width] = clashes
    with capsys.disabled():
        print(f"\n{trace}: rows whose short names collide: {collisions}")
    assert collisions[48] == 0  # measured on every fixture: the 80-column kernel room is 48+


def test_python_frames_keep_file_and_function():
    frame = "vllm/model_executor/layers/fused_moe/fused_moe.py(1633): fused_experts_impl"
    short = short_event_name(frame, 44)
    assert len(short) <= 44 and short.endswith("fused_moe.py(1633): fused_experts_impl")


# --- trace -----------------------------------------------------------------------------------


def _block(lines: list[str], title: str) -> list[str]:
    """The rows of the table titled ``title``: the lines after its header rule, up to the next
    line that is not a row (a title, a note)."""
    start = next(i for i, line in enumerate(lines) if line.startswith(title))
    rule = next(i for i in range(start, len(lines)) if set(lines[i].strip()) == {"─"})
    rows = []
    for line in lines[rule + 1:]:
        if not re.match(r"^\s*[-\d.,]+%?\s", line):
            break
        rows.append(line)
    return rows


@pytest.mark.parametrize("trace", ["nvidia_b200_vllm_eager_tp8.pt.trace.json.gz",
                                   "amd_mi300x_hf_qwen1.5-0.5b.pt.trace.json.gz",
                                   "amd_mi350x_rocprofv3_results.json.gz"])
def test_cli_trace_fits_80_columns_one_kernel_per_line(fixtures_dir, trace, tmp_path, capsys):
    out = tmp_path / "t.json"
    assert main(["trace", str(fixtures_dir / "traces" / trace), "-o", str(out)]) == 0
    text = capsys.readouterr().out
    assert "\x1b[" not in text  # no colour codes in a log file
    lines = text.splitlines()
    _assert_fits(lines)
    data = orjson.loads((out / "trace.json").read_bytes())["traces"][0]
    for dev in data["devices"]:
        top = dev["kernels"]["top"][:10]
        rows = _block(lines, "top kernels")
        assert len(rows) == len(top)  # no kernel wrapped onto a second line
        for row, kernel in zip(rows, top):
            assert f"{kernel['share_of_busy']:.1%}" in row
            named = kernel_name_forms(kernel["name"])[-1].split("<")[0]
            assert named.rsplit("::", 1)[-1][:8] in row or "…" in row
        lines = lines[lines.index(rows[-1]) + 1:]  # next device
    full = [k["name"] for d in data["devices"] for k in d["kernels"]["top"]]
    assert any(len(n) > 80 for n in full) or trace.startswith("amd_mi300x")  # full names kept


def test_top_kernels_wide_console_adds_columns(fixtures_dir):
    dev = _analysed(fixtures_dir, "nvidia_b200_vllm_eager_tp8.pt.trace.json.gz").devices[0]
    narrow = _render(top_kernels_table(dev, 80), 80)
    wide = _render(top_kernels_table(dev, 160), 160)
    _assert_fits(narrow)
    _assert_fits(wide, 160)
    assert "category" not in narrow[1] and "category" in wide[1]


def test_compare_fits_80_columns(fixtures_dir):
    a = _analysed(fixtures_dir, "amd_mi300x_hf_qwen1.5-0.5b.pt.trace.json.gz")
    b = _analysed(fixtures_dir, "nvidia_h100_hf_qwen1.5-0.5b.pt.trace.json.gz")
    diff = compare_results(a, b)
    for table in comparison_tables(diff, 80):
        lines = _render(table)
        _assert_fits(lines)
        rows = [line for line in lines[3:] if line.strip()]
        assert rows and all(re.search(r"(-|\d\.\d\dx)$", r.rstrip()) for r in rows)


def test_cli_compare_fits_80_columns(fixtures_dir, tmp_path, capsys):
    traces = fixtures_dir / "traces"
    assert main(["trace", "--compare", str(traces / "amd_mi300x_hf_qwen1.5-0.5b.pt.trace.json.gz"),
                 str(traces / "nvidia_h100_hf_qwen1.5-0.5b.pt.trace.json.gz"),
                 "-o", str(tmp_path / "c.json")]) == 0
    _assert_fits(capsys.readouterr().out.splitlines())


# --- decomposition ---------------------------------------------------------------------------


def _decomposition() -> Decomposition:
    """A split the way the lead's next one looks (client / network / frontend parts), with a
    per-request source and a histogram quantile: rendering must not depend on the key names."""
    span = "per-request spans (vLLM --enable-per-request-metrics, response 'metrics' field)"
    comps = [
        Component("ttft", "TTFT (client)", None, "client records: first chunk - scheduled", 120.0,
                  110.0, 300.0, count=200),
        Component("ttft.client", "client send lag + parsing", "ttft", "client records", 0.4,
                  share=0.004, count=200),
        Component("ttft.network", "network (TCP + TLS + HTTP round trip)", "ttft",
                  "latscope net probes: kept-alive HTTP round trip p50", 0.9, share=0.008),
        Component("ttft.frontend", "HTTP frontend (arrival -> engine)", "ttft", span, 6.0,
                  share=0.05, count=200),
        Component("ttft.server", "server TTFT (arrival -> first token)", "ttft",
                  "vllm:time_to_first_token_seconds (histogram delta over the run)", 112.7,
                  96.0, 480.0, 90.0, 500.0, 10.0, 0.0, count=200, share=0.94),
        Component("ttft.server.queue", "queue (QUEUED -> SCHEDULED)", "ttft.server", span, 80.0,
                  share=0.67, count=200),
        Component("ttft.server.prefill", "prefill (SCHEDULED -> first token)", "ttft.server",
                  span, 40.0, share=1.5, count=200),  # an impossible share: must not print
        Component("e2e", "E2E (client)", None, "client records: end - scheduled", 900.0,
                  count=200),
        Component("e2e.decode", "decode (client: first chunk -> end)", "e2e", "client records",
                  780.0, share=0.87, count=200),
        Component("e2e.decode.engine", "decode in the engine (first -> last token)",
                  "e2e.decode", span, 770.0, share=0.86, count=200,
                  note="negative: smaller than the error of the figures it is computed from"),
    ]
    return Decomposition(comps, "ttft.server.queue", "e2e.decode", 12.0, "histograms", 200, 200.0)


@pytest.mark.parametrize("width", [80, 100, 140])
def test_decomposition_is_a_tree_one_row_per_component(width):
    result = _decomposition()
    lines = _render(decomposition_table(result, width), width)
    _assert_fits(lines, width)
    rows = lines[2:]
    assert len(rows) == len(result.components)  # nothing wrapped
    depth = {}
    for c in result.components:
        row = next(r for r in rows if c.label in r)
        assert re.search(r"\[\d+\]", row) and _num(c.mean_ms) in row
        depth[c.key] = len(re.match(r"^[\s│├└─]*", row).group(0))
        if c.parent:
            assert depth[c.key] > depth[c.parent]
    assert not any("150%" in r for r in rows)  # the impossible share is refused
    if width >= 140:  # a wide console has room for the quantiles and their buckets
        assert "p99 ms" in lines[0] and "[10-100]" not in lines[0]
        assert any("[90-500]" in r or "<= 500" in r for r in rows)


def _num(value: float) -> str:
    return f"{value:.1f}" if abs(value) >= 10 else f"{value:.2f}"


def test_decomposition_sources_are_numbered_notes():
    result = _decomposition()
    rows = _render(decomposition_table(result, 80))[2:]
    notes = _render(decomposition_notes(result))
    _assert_fits(notes)
    text = " ".join(line.strip() for line in notes)
    by_number = dict(re.findall(r"\[(\d+)\] (.*?)(?= \[\d+\] |$)", text))
    for c in result.components:
        row = next(r for r in rows if c.label in r)
        number = re.search(r"\[(\d+)\]", row).group(1)
        assert by_number[number].startswith(c.source), (c.key, by_number[number])
        if c.note:
            assert c.note in by_number[number]
    assert len(by_number) == len({(c.source, c.note) for c in result.components})


def test_bench_prints_80_columns_with_decomposition(tmp_path, capsys):
    with FakeServer(ttft_ms=5, itl_ms=1) as srv:
        rc = main(["bench", "--url", srv.url, "-n", "12", "-c", "3", "--output-len", "8",
                   "--mix", "short:1:16:4,a_rather_long_group_name:1:64:8", "--slo", "ttft=1000",
                   "--no-progress", "--scrape-interval", "0.2", "--output-dir",
                   str(tmp_path / "run")])
    text = capsys.readouterr().out
    assert rc == 0 and "\x1b[" not in text
    lines = text.splitlines()
    _assert_fits(lines)
    assert any(line.startswith("TTFT (client) [1]") for line in lines)
    assert any(re.match(r"^\[1\] client records", line.strip()) for line in lines)


# --- findings --------------------------------------------------------------------------------


def _finding(impact) -> Finding:
    return Finding(
        "server.queue_token_budget", Severity.WARNING,
        "Requests queue while the batch is below max_num_seqs (Running 307, Waiting 204, KV "
        "34.9%): the per-step token budget admits prompts too slowly",
        [Evidence("vllm:num_requests_waiting", 204, "reqs", "server.log:2452 (11-30 04:41:04)"),
         Evidence("max_num_batched_tokens", 8192, "tokens", "server.log:11"),
         Evidence("a_very_long_evidence_name_without_any_space_in_it_at_all_to_fold_somewhere",
                  0.123456, "", "server.log:11")],
        why="Each engine step schedules at most max_num_batched_tokens tokens.",
        fix="Raise --max-num-batched-tokens and measure with latscope sweep.",
        reference="vLLM docs: optimization.md", layer="queue", impact=impact)


@pytest.mark.parametrize("impact", [
    {"target": "ttft_p99", "share": 0.41, "value_ms": 230.0, "measured_at": "runs/sweep/step-03"},
    {"metric": "ttft_p50_ms", "value": 41.0, "share": 0.62},
])
def test_findings_list_fits_and_keeps_words_whole(impact):
    f = _finding(impact)
    lines = _render(findings_table([f]))
    _assert_fits(lines)
    head = next(line for line in lines if line.startswith("warning"))
    assert head.split()[:2] == ["warning", "Requests"]  # severity and title on one line
    words = set(" ".join(lines).split())
    for word in f.title.split():
        assert word in words, word  # no title word chopped across lines
    impact_line = next(line for line in lines if "impact:" in line)
    assert f"{impact['share']:.0%}" in impact_line
    target = impact.get("target") or impact["metric"]
    assert IMPACT_TARGETS.get(target, target).split()[-1] in impact_line
    if "measured_at" in impact:
        assert impact["measured_at"] in " ".join(lines)


def test_impossible_impact_share_is_not_printed():
    text = describe({"target": "ttft_mean", "share": 1.7})
    assert "170%" not in text and "mean client TTFT" in text and "refused" in text


# --- other verbs -----------------------------------------------------------------------------


@pytest.mark.parametrize("log", ["cpu-vllm0.32", "h200-vllm0.26"])
def test_cli_logs_fits_80_columns(fixtures_dir, log, capsys):
    assert main(["logs", str(fixtures_dir / "vllm" / log / "server.log"), "--show-ok"]) == 0
    text = capsys.readouterr().out
    _assert_fits(text.splitlines())
    assert "\x1b[" not in text


def test_cli_doctor_without_server_fits_80_columns(capsys):
    assert main(["doctor", "--all"]) == 0
    _assert_fits(capsys.readouterr().out.splitlines())


def test_cli_net_fits_80_columns(capsys):
    with FakeServer(ttft_ms=2, itl_ms=1) as srv:
        main(["net", "--url", srv.url, "-n", "3", "--stream-requests", "1"])
    lines = capsys.readouterr().out.splitlines()
    assert lines
    _assert_fits(lines)


def test_sweep_and_trial_tables_fit_80_columns():
    steps = [Step(load, {"requests_per_s": load * 0.9, "output_tokens_per_s": load * 57.3,
                         "ttft_p50_ms": 40.0 * load, "ttft_p99_ms": 95.0 * load,
                         "itl_p50_ms": 11.0, "itl_p99_ms": 31.0 + load, "e2e_p50_ms": 900.0 * load,
                         "e2e_p99_ms": 1900.0 * load, "error_rate": 0.0}, phase="grow")
             for load in (1, 2, 4, 8, 16, 32, 64, 128)]
    _assert_fits(_render(sweep_table(steps, analyse(steps, []), "concurrency")))
    trials = [Trial({"max_num_seqs": 2 ** i, "max_num_batched_tokens": 1024 * 2 ** i},
                    status="done", metrics={"requests_per_s": 3.2 * i, "e2e_p99_ms": 1234.5,
                                            "ttft_p99_ms": 321.0, "itl_p99_ms": 45.6,
                                            "error_rate": 0.0}, feasible=i % 2 == 0)
              for i in range(1, 6)]
    trials.append(Trial({"max_num_seqs": 512, "max_num_batched_tokens": 65536}, status="failed",
                        error="server did not become ready within 600 s (see the trial's log)"))
    lines = _render(trials_table(trials, "requests_per_s", "e2e_p99_ms", trials[1].config))
    _assert_fits(lines)
    text = "\n".join(lines)
    assert "…" not in text and "max_num_batched_tokens=65536" in text  # nothing chopped
    assert any(line.startswith("#5: server did not become ready") for line in lines)


def test_console_is_80_columns_without_colour_when_not_a_tty(monkeypatch):
    console = make_console()
    assert console.width == 80 and console.color_system is None
    monkeypatch.setenv("COLUMNS", "132")
    assert make_console().width == 132
