"""`latscope logs FILE...`: read vLLM server logs: configuration, periodic stats, findings."""

from __future__ import annotations

import argparse

HELP = "read vLLM server logs: startup configuration, stats over time, findings"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("files", nargs="+", metavar="FILE", help="vLLM server log file(s)")
    parser.add_argument("--json", metavar="PATH",
                        help="also write config, stats, line rate and findings as JSON to PATH "
                             "('-' for stdout, and nothing else)")
    parser.add_argument("--stats", type=int, default=20, metavar="N",
                        help="show at most N periodic stats lines (default 20; 0 hides them)")
    parser.add_argument("--show-ok", action="store_true", help="list checks that passed too")


def run(args: argparse.Namespace) -> int:
    import sys
    from pathlib import Path

    import orjson

    from latscope.findings.server import findings_from_log
    from latscope.cli.output import check_writable, write_atomic
    from latscope.errors import ConfigError
    from latscope.report.findings import findings_to_json, print_findings
    from latscope.report.text import make_console
    from latscope.report.observe import line_rate_text, log_config_table, log_stats_table
    from latscope.server.logs import parse_log

    to_stdout = args.json == "-"
    if args.json and not to_stdout:
        check_writable(args.json, "--json")  # before the report, not after it
    console = make_console(stderr=to_stdout)
    results = []
    for name in args.files:
        path = Path(name)
        if path.is_dir():
            raise ConfigError(f"{name}: is a folder, not a log file")
        if not path.is_file():
            raise ConfigError(f"{name}: no such log file")
        log = parse_log(path)
        findings = findings_from_log(log)
        if not log.config.get("version") and not log.stats:
            console.print(f"[yellow]{name}: no vLLM startup or stats lines found[/yellow]")
        results.append({"log": log.to_dict(), "findings": findings_to_json(findings)})
        if not to_stdout:
            console.print(log_config_table(log))
            if args.stats and log.stats:
                console.print(log_stats_table(log, limit=args.stats))
            console.print(f"[dim]{line_rate_text(log)}[/dim]")
            print_findings(findings, console, title=f"Findings: {name}", show_ok=args.show_ok)
    if args.json:
        data = orjson.dumps(results if len(results) > 1 else results[0],
                            option=orjson.OPT_INDENT_2, default=str)
        if to_stdout:
            sys.stdout.buffer.write(data + b"\n")
        else:
            write_atomic(args.json, data, "--json")
    return 0
