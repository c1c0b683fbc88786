"""What several verbs share: the API-key rule, the base workload, load lists."""

from __future__ import annotations

import argparse
import os
import re
from typing import Any


def api_key(args: argparse.Namespace) -> str | None:
    """One rule for every verb that sends requests: ``--api-key``, else ``$LATSCOPE_API_KEY``,
    else ``$OPENAI_API_KEY``. Never printed or written."""
    return (getattr(args, "api_key", None) or os.environ.get("LATSCOPE_API_KEY")
            or os.environ.get("OPENAI_API_KEY"))


def add_api_key_argument(group: Any) -> None:
    group.add_argument("--api-key", help="API key (default: $LATSCOPE_API_KEY or "
                       "$OPENAI_API_KEY); never printed or written")


def bench_base_config(args: argparse.Namespace, url: str, model: str | None) -> Any:
    """The BenchConfig every sweep step or tune trial starts from (load and output dir set per
    run)."""
    from latscope.load.config import BenchConfig, WorkloadSpec, load_workload_file

    spec = WorkloadSpec(input_len=args.input_len, output_len=args.output_len)
    if getattr(args, "workload", None):
        spec = WorkloadSpec(**{**spec.__dict__, **load_workload_file(args.workload)})
    return BenchConfig(url=url, endpoint=args.endpoint, model=model or None, workload=spec,
                       num_requests=None if args.duration else args.num_requests,
                       duration_s=args.duration, seed=args.seed, tokenizer=args.tokenizer,
                       api_key=api_key(args))


_UNITS = {"ms": 0.001, "s": 1, None: 1, "m": 60, "min": 60, "h": 3600, "d": 86400}


def parse_seconds(text: str, flag: str, *, minimum: float = 0.0) -> float:
    """A duration flag's value in seconds: ``240``, ``90s``, ``10m``, ``1h``, ``2d``, ``500ms``;
    a value at or below zero, or below ``minimum``, is refused in one line naming the flag."""
    from latscope.errors import ConfigError

    match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*(ms|s|m|min|h|d)?\s*", str(text))
    if not match:
        raise ConfigError(f"{flag} {text!r}: use seconds or a unit: 90s, 10m, 1h")
    value = float(match.group(1)) * _UNITS[match.group(2)]
    if value <= 0:
        raise ConfigError(f"{flag} {text!r}: must be above zero")
    if value < minimum:
        raise ConfigError(f"{flag} {text!r}: at least {minimum:g} s")
    return value


def parse_loads(text: str | None) -> list[float] | None:
    """``auto`` (None) or a list of loads, e.g. ``1,4,16``."""
    from latscope.errors import ConfigError

    if text is None or text == "auto":
        return None
    try:
        values = [float(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise ConfigError(f"bad load list {text!r}: use 'auto' or numbers like 1,4,16") from None
    if not values or any(v <= 0 for v in values):
        raise ConfigError("loads must be > 0")
    return values


def add_output_arguments(parser: argparse.ArgumentParser, kind: str) -> None:
    """``-o/--output-dir`` and ``--json``: the same two flags on every verb."""
    parser.add_argument("-o", "--output-dir", metavar="DIR",
                        help=f"run directory (default ./latscope-runs/{kind}-TIME)")
    parser.add_argument("--json", action="store_true",
                        help="print the result as JSON on stdout, and nothing else")


def open_run(args: argparse.Namespace, kind: str, **target: Any) -> Any:
    """The verb's run directory, made before the slow work (a bad path fails at once)."""
    from latscope.rundir import RunDir

    return RunDir.create(kind, args.output_dir, target=target or None)


def finish_run(run: Any, data_name: str, data: Any, findings: list[Any], *, as_json: bool,
               status: str = "ok") -> None:
    """Write the verb's data and findings into its run directory, close the manifest, and
    with ``--json`` print the data on stdout."""
    import sys

    import orjson

    run.write(data_name, data)
    run.write_findings(findings)
    run.finish(status)
    if as_json:
        sys.stdout.buffer.write(orjson.dumps(data, option=orjson.OPT_INDENT_2 |
                                             orjson.OPT_SERIALIZE_NUMPY, default=str) + b"\n")
        sys.stdout.flush()


def check_numeric_flags(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """Refuses a numeric flag given as nan, inf or a negative number: argparse's ``float``
    takes "nan" and "inf", and no latscope flag means anything below zero (``--rate nan`` once
    ran to exit 0). Walks the chosen verb's parser (and its own sub-verb); the flags that must
    be above zero are checked where they are used (``BenchConfig.validate`` and the like)."""
    import math

    from latscope.errors import ConfigError

    for action in _chosen_actions(parser, args):
        if action.type not in (int, float) or not action.option_strings:
            continue
        value = getattr(args, action.dest, None)
        if value is None or value is action.default:
            continue
        flag = next((o for o in action.option_strings if o.startswith("--")),
                    action.option_strings[0])
        if isinstance(value, float) and not math.isfinite(value):
            raise ConfigError(f"{flag} {value}: give a finite number")
        if value < 0:
            raise ConfigError(f"{flag} {value:g}: must not be negative")


def _chosen_actions(parser: argparse.ArgumentParser,
                    args: argparse.Namespace) -> list[argparse.Action]:
    actions: list[argparse.Action] = []
    for action in parser._actions:  # argparse has no public walk over its parsers
        if isinstance(action, argparse._SubParsersAction):
            chosen = action.choices.get(getattr(args, action.dest, None) or "")
            if chosen is not None:
                actions += _chosen_actions(chosen, args)
        else:
            actions.append(action)
    return actions
