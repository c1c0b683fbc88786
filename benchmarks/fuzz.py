"""Run the fuzz targets of tests/unit/fuzz longer than CI does, and print what they found.

    python3 benchmarks/fuzz.py                      # 2000 examples per target, random seed
    LATSCOPE_FUZZ_EXAMPLES=20000 python3 benchmarks/fuzz.py kineto_json sse
    python3 benchmarks/fuzz.py --seed 7             # reproduce a run

Per target: examples run, examples/s, and either "ok" or the first failure, shrunk to a small
example, with its exception. Exit status 1 when any target failed. Unlike CI (derandomized, no
shrinking), every run draws new examples, so repeated runs keep finding new inputs.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import traceback
from pathlib import Path

from hypothesis import HealthCheck, Phase, given, seed, settings

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests" / "unit" / "fuzz"))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))

from fuzztargets import TARGETS  # noqa: E402


def run_target(target, examples: int, run_seed: int | None) -> tuple[int, float, str | None]:
    calls = 0

    def check(value):
        nonlocal calls
        calls += 1
        target.check(value)

    test = settings(max_examples=examples, deadline=None, database=None,
                    phases=[Phase.generate, Phase.shrink],
                    suppress_health_check=list(HealthCheck))(given(target.strategy)(check))
    if run_seed is not None:
        test = seed(run_seed)(test)
    start = time.perf_counter()
    failure = None
    try:
        test()
    except Exception as exc:  # noqa: BLE001 - what the fuzzer found is the result
        failure = "".join(traceback.format_exception_only(type(exc), exc)).strip()
        notes = getattr(exc, "__notes__", [])
        if notes:
            failure += "\n" + "\n".join(notes)
    return calls, time.perf_counter() - start, failure


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("targets", nargs="*", help="names (default: all): "
                        + ", ".join(t.name for t in TARGETS))
    parser.add_argument("--seed", type=int, default=None)
    args = parser.parse_args()
    examples = int(os.environ.get("LATSCOPE_FUZZ_EXAMPLES", "2000"))
    chosen = [t for t in TARGETS if not args.targets or t.name in args.targets]
    failed = 0
    print(f"{'target':16} {'examples':>9} {'s':>7} {'ex/s':>7}  result")
    for target in chosen:
        calls, seconds, failure = run_target(target, examples, args.seed)
        rate = calls / seconds if seconds else 0.0
        print(f"{target.name:16} {calls:9d} {seconds:7.1f} {rate:7.0f}  "
              f"{'ok' if failure is None else 'FAILED'}", flush=True)
        if failure:
            failed += 1
            print("    " + failure.replace("\n", "\n    "), flush=True)
    print(f"{failed} of {len(chosen)} targets failed" if failed else "no failures found")
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
