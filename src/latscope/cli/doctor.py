"""`latscope doctor`: host, GPU and server-config checks for known latency killers (no load sent).

Prints the findings (with evidence and fixes); ``--json`` writes them with the raw facts read;
``--collect OUT.tar.gz`` captures this host's /proc, /sys and tool outputs for ``--root``.
"""

from __future__ import annotations

import argparse
import os

from latscope.cli.common import add_output_arguments

HELP = "check host, GPU and server config for known latency killers (no load sent)"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--url", help="server base URL, e.g. http://127.0.0.1:8000")
    parser.add_argument("--pid", type=int, help="server process id (found from a local --url "
                        "when omitted): its environment, command line and CPU affinity are read")
    parser.add_argument("--log", help="the server's startup log (vLLM)")
    parser.add_argument("--root", help="analyse a tree captured by --collect (directory or "
                        ".tar.gz) instead of this host")
    parser.add_argument("--collect", metavar="OUT.tar.gz",
                        help="capture this host's /proc, /sys and GPU tool outputs (secrets "
                        "redacted) into OUT.tar.gz, for --root elsewhere")
    add_output_arguments(parser, "doctor")
    parser.add_argument("--all", action="store_true", help="also show passed and skipped checks")
    parser.add_argument("--api-key-env", default="OPENAI_API_KEY", metavar="VAR",
                        help="environment variable holding the server's API key (default: "
                        "%(default)s); sent as a bearer token, never printed")


def run(args: argparse.Namespace) -> int:
    from pathlib import Path

    from latscope.campaign.doctor import run_doctor
    from latscope.cli.common import finish_run, open_run
    from latscope.cli.output import check_writable
    from latscope.env.collect import collect
    from latscope.model import Severity
    from latscope.report.findings import print_findings
    from latscope.report.text import make_console

    console = make_console(stderr=args.json)
    if args.collect:
        check_writable(args.collect, "--collect")  # before the probes, not after them
    if args.collect:
        out = collect(Path(args.collect), url=args.url, pid=args.pid, log=args.log)
        console.print(f"wrote {out.path} ({out.files} files; tools: {', '.join(out.tools) or 'none'}"
                      f"; pid: {out.pid if out.pid is not None else 'none'})")
        console.print(f"analyse it with: latscope doctor --root {out.path}")
        return 0
    key = os.environ.get(args.api_key_env)
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    from latscope.redact import redact_url_password

    run = open_run(args, "doctor", url=redact_url_password(args.url) if args.url else None,
                   root=args.root)
    report = run_doctor(url=args.url, pid=args.pid, log=args.log, root=args.root, headers=headers)
    finish_run(run, "doctor.json", report.to_dict(), report.findings, as_json=args.json)
    if args.json:
        return 0
    facts = report.facts
    where = f"captured tree {args.root}" if args.root else "this host"
    console.print(f"[bold]latscope doctor[/bold] on {where}; server pid: "
                  f"{facts['pid'] if facts['pid'] is not None else 'unknown'}"
                  f"{' (' + facts['pid_source'] + ')' if facts['pid_source'] else ''}; "
                  f"environment read: {facts['env_source']}")
    print_findings(report.findings, console, title="doctor", show_ok=args.all)
    counts = {s: sum(f.severity == s for f in report.findings) for s in Severity}
    console.print(", ".join(f"{n} {s.value}" for s, n in counts.items() if n)
                  + ("" if args.all else "  (--all shows passed and skipped checks)"))
    console.print(f"[dim]run directory: {run.path}[/dim]")
    return 0
