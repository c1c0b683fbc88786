"""How often does ``latscope compare`` cry wolf, and how often does it catch a real change?

Repeats, ``--pairs`` times, three bench runs of one configuration against one server:

    A   the server as it is          B   the same again (its own prompts)
    C   the same through a planted change (vllm: a delay proxy adding ``--delay-ms`` to each
        direction of every chunk, so TTFT and E2E grow by about twice that; fake: the fake
        server with ``--fake-ttft-ms`` and the planted one 20% slower to its first token)

then compares A with B (the same configuration: exit 1 is a false alarm) and A with C (the
planted change: exit 1 is a catch), each through ``campaign.compare.compare_runs`` under the
default policy, and groups of three runs a side (A A A --vs B B B, and A A A --vs C C C: the
between-run interval), as latscope compare does and again with --allow host,client (compared
although other work contended for the CPUs). Prints, per way of comparing, the share of exits
0 / 1 / 2 with a 95% Clopper-Pearson interval on the false-positive rate and on the power, the
reasons for exit 2, and the part of the chain named for the planted change. ``--reanalyse DIR``
compares the runs a ``--keep DIR`` holds again, with this latscope, without running anything.

    python3 benchmarks/compare_false_positive.py --target fake --pairs 20          # ~2 min
    flock /tmp/latscope-heavy.lock python3 benchmarks/compare_false_positive.py \\
        --target vllm --pairs 20 --requests 64                                     # ~15 min
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Iterator

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests"))
sys.path.insert(0, str(REPO / "src"))

from latscope.campaign.compare import CompareOptions, compare_runs  # noqa: E402
from latscope.campaign.observe import observe  # noqa: E402
from latscope.load import BenchConfig  # noqa: E402
from latscope.load.workload import WorkloadSpec  # noqa: E402


def _args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--target", choices=("vllm", "fake"), default="fake")
    p.add_argument("--pairs", type=int, default=20)
    p.add_argument("--requests", type=int, default=64)
    p.add_argument("--concurrency", type=int, default=8)
    p.add_argument("--input-len", default="128")
    p.add_argument("--output-len", default="64")
    p.add_argument("--delay-ms", type=float, default=12.0, help="vllm: planted delay each way")
    p.add_argument("--fake-ttft-ms", type=float, default=50.0)
    p.add_argument("--fail-on", default=None, help="the policy (default: the default policy)")
    p.add_argument("--keep", help="keep the run directories here")
    p.add_argument("--reanalyse", metavar="DIR", help="no runs: compare the runs a --keep DIR "
                   "holds again (with this latscope's rules), and print the tables")
    return p.parse_args()


@contextlib.contextmanager
def _servers(args: argparse.Namespace) -> Iterator[tuple[str, str, str | None, set[int]]]:
    """(URL of A and B, URL of C, tokenizer, the servers' pids) for the target chosen."""
    if args.target == "fake":
        from fakeserver import FakeServer

        with FakeServer(ttft_ms=args.fake_ttft_ms, itl_ms=10) as same, \
                FakeServer(ttft_ms=args.fake_ttft_ms * 1.2, itl_ms=10) as planted:
            yield same.url, planted.url, None, {p.proc.pid for p in (same, planted) if p.proc}
        return
    from delay_proxy import DelayProxy
    from latscope.server.target import LocalTarget

    with LocalTarget() as target:
        port = int(target.url.rsplit(":", 1)[1])
        with DelayProxy(("127.0.0.1", port), delay_ms=args.delay_ms) as proxy:
            pids = {p for p in (target.pid, proxy.proc.pid if proxy.proc else None) if p}
            yield target.url, proxy.url, str(target.tokenizer_dir or "") or None, pids


def _bench(url: str, out: Path, seed: int, args: argparse.Namespace, tokenizer: str | None,
           metrics_url: str, pids: set[int]) -> Path:
    cfg = BenchConfig(url=url, concurrency=args.concurrency, num_requests=args.requests,
                      workload=WorkloadSpec(input_len=args.input_len, output_len=args.output_len),
                      seed=seed, output_dir=out, tokenizer=tokenizer)
    scrape = 1.0 if args.target == "vllm" else 0.0
    # host/cpu.json as latscope bench writes it: a run on a host busy with other work is
    # refused by compare, and the exit-2 reasons below say how often that happened
    observe(cfg, scrape_interval_s=scrape, metrics_url=metrics_url, server_pids=pids,
            gpu_telemetry=False, workers=1)
    return out


def _compare(base: list[Path], new: list[Path], fail_on: str | None) -> dict[str, Any]:
    """The default comparison, and the same with --allow host,client (compared although other
    work contended for the CPUs): what the refusal of a contended host saves a gate from."""
    out = {}
    for name, allow in (("", frozenset()), ("allow_host", frozenset({"host", "client"}))):
        c = compare_runs(base, new, CompareOptions(fail_on=fail_on, allow=allow))
        out[name] = {"exit": c.exit_code, "reasons": c.reasons, "layer": c.layer_sentence,
                     "moved": next((f["layer"] for f in c.findings
                                    if f["id"] == "compare.layer_moved"), "")}
    return out


def _clopper_pearson(k: int, n: int) -> tuple[float, float]:
    from scipy import stats

    lo = 0.0 if k == 0 else float(stats.beta.ppf(0.025, k, n - k + 1))
    hi = 1.0 if k == n else float(stats.beta.ppf(0.975, k + 1, n - k))
    return lo, hi


def _report(name: str, results: list[dict[str, Any]], counted: int) -> None:
    n = len(results)
    exits = collections.Counter(r["exit"] for r in results)
    lo, hi = _clopper_pearson(exits[counted], n)
    what = "false-positive rate" if counted == 1 and "same" in name else "power"
    print(f"{name}: {n} comparisons: exit 0 {exits[0]}, exit 1 {exits[1]}, exit 2 {exits[2]}; "
          f"{what} {exits[counted] / n:.0%} [{lo:.0%}, {hi:.0%}]")
    reasons = collections.Counter(r.split(":")[0] for res in results if res["exit"] == 2
                                  for r in res["reasons"])
    if reasons:
        print("    exit 2 for: " + ", ".join(f"{k} ({v})" for k, v in reasons.most_common()))
    layers = collections.Counter(r["moved"] for r in results if r["exit"] == 1)
    if layers and "planted" in name:
        print("    layer named: " + ", ".join(f"{k or 'none'} ({v})"
                                             for k, v in layers.most_common()))


def _reanalysed(root: Path, args: argparse.Namespace
                ) -> tuple[dict[str, list[Path]], dict[str, list[dict[str, Any]]]]:
    runs: dict[str, list[Path]] = {"A": [], "B": [], "C": []}
    pairs: dict[str, list[dict[str, Any]]] = {"same": [], "planted": []}
    i = 0
    while all((root / f"{i:02d}-{arm}" / "requests.jsonl").is_file() for arm in "ABC"):
        for arm in "ABC":
            runs[arm].append(root / f"{i:02d}-{arm}")
        pairs["same"].append(_compare([runs["A"][i]], [runs["B"][i]], args.fail_on))
        pairs["planted"].append(_compare([runs["A"][i]], [runs["C"][i]], args.fail_on))
        i += 1
    args.pairs = i
    return runs, pairs


def main() -> None:
    args = _args()
    if args.reanalyse:
        runs, pairs = _reanalysed(Path(args.reanalyse), args)
        _tables(args, runs, pairs, Path(args.reanalyse))
        return
    root = Path(args.keep or tempfile.mkdtemp(prefix="compare-fp-"))
    root.mkdir(parents=True, exist_ok=True)
    runs: dict[str, list[Path]] = {"A": [], "B": [], "C": []}
    pairs: dict[str, list[dict[str, Any]]] = {"same": [], "planted": []}
    started = time.monotonic()
    with _servers(args) as (url, planted_url, tokenizer, pids):
        _bench(url, root / "warmup", 1, args, tokenizer, url, pids)  # the first run: not kept
        for i in range(args.pairs):
            for arm, where in (("A", url), ("B", url), ("C", planted_url)):
                seed = 1000 * i + "ABC".index(arm) + 2
                runs[arm].append(_bench(where, root / f"{i:02d}-{arm}", seed, args, tokenizer,
                                        url, pids))
            pairs["same"].append(_compare([runs["A"][i]], [runs["B"][i]], args.fail_on))
            pairs["planted"].append(_compare([runs["A"][i]], [runs["C"][i]], args.fail_on))
            print(f"  pair {i + 1}: same -> exit {pairs['same'][-1]['']['exit']}, planted -> "
                  f"exit {pairs['planted'][-1]['']['exit']} (--allow host,client: "
                  f"{pairs['same'][-1]['allow_host']['exit']}, "
                  f"{pairs['planted'][-1]['allow_host']['exit']}; "
                  f"{time.monotonic() - started:.0f} s)", flush=True)
    _tables(args, runs, pairs, root)


def _tables(args: argparse.Namespace, runs: dict[str, list[Path]],
            pairs: dict[str, list[dict[str, Any]]], root: Path) -> None:
    groups = [slice(i, i + 3) for i in range(0, args.pairs - 2, 3)]
    repeated = {arm: [_compare(runs["A"][g], runs[arm][g], args.fail_on) for g in groups]
                for arm in ("B", "C")}
    print(f"\n{args.target}: {args.pairs} pairs of {args.requests} requests at c="
          f"{args.concurrency}, policy {args.fail_on or 'default'}, {root}")
    for variant, words in (("", ""), ("allow_host", " (--allow host,client)")):
        print(f"\ncompared as latscope compare{words or ' does by default'}:")
        _report(f"one run a side, same configuration{words}",
                [p[variant] for p in pairs["same"]], 1)
        _report(f"one run a side, planted change{words}",
                [p[variant] for p in pairs["planted"]], 1)
        if groups:
            _report(f"3 runs a side, same configuration{words}",
                    [p[variant] for p in repeated["B"]], 1)
            _report(f"3 runs a side, planted change{words}",
                    [p[variant] for p in repeated["C"]], 1)


if __name__ == "__main__":
    main()
