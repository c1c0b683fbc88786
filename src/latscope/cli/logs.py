"""`latscope logs FILE...`: read vLLM server logs: configuration, periodic stats, findings."""

from __future__ import annotations

import argparse

from latscope.cli.common import add_output_arguments

HELP = "read vLLM server logs: startup configuration, stats over time, findings"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("files", nargs="+", metavar="FILE", help="vLLM server log file(s)")
    add_output_arguments(parser, "logs")
    parser.add_argument("--stats", type=int, default=20, metavar="N",
                        help="show at most N periodic stats lines (default 20; 0 hides them)")
    parser.add_argument("--show-ok", action="store_true", help="list checks that passed too")


def run(args: argparse.Namespace) -> int:
    from pathlib import Path

    from latscope.cli.common import finish_run, open_run
    from latscope.errors import ConfigError
    from latscope.findings.server import findings_from_log
    from latscope.report.findings import findings_to_json, print_findings
    from latscope.report.observe import line_rate_text, log_config_table, log_stats_table
    from latscope.report.text import make_console
    from latscope.server.logs import parse_log

    for name in args.files:  # every input checked before anything is written
        if Path(name).is_dir():
            raise ConfigError(f"{name}: is a folder, not a log file")
        if not Path(name).is_file():
            raise ConfigError(f"{name}: no such log file")
    run = open_run(args, "logs", logs=list(args.files))
    console = make_console(stderr=args.json)
    results, all_findings = [], []
    for name in args.files:
        log = parse_log(Path(name))
        findings = findings_from_log(log)
        all_findings += findings
        if not log.config.get("version") and not log.stats:
            console.print(f"[yellow]{name}: no vLLM startup or stats lines found[/yellow]")
        results.append({"log": log.to_dict(), "findings": findings_to_json(findings)})
        if not args.json:
            console.print(log_config_table(log))
            if args.stats and log.stats:
                console.print(log_stats_table(log, limit=args.stats))
            console.print(f"[dim]{line_rate_text(log)}[/dim]")
            print_findings(findings, console, title=f"Findings: {name}", show_ok=args.show_ok)
    finish_run(run, "log.json", results if len(results) > 1 else results[0], all_findings,
               as_json=args.json)
    if not args.json:
        console.print(f"[dim]run directory: {run.path}[/dim]")
    return 0
