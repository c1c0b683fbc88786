"""`latscope net`: DNS, TCP, TLS, HTTP round trips (new vs reused connections), streamed delivery
gaps and iperf3, ending with the network's share of the server's measured TTFT."""

from __future__ import annotations

import argparse
import os

from latscope.cli.common import add_output_arguments

HELP = "measure the network path to a server and its share of TTFT"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--url", required=True, help="server base URL, e.g. http://10.0.0.5:8000")
    parser.add_argument("-n", "--probes", type=int, default=20,
                        help="samples per phase (default: %(default)s)")
    parser.add_argument("--stream-requests", type=int, default=3,
                        help="short streamed completions for the TTFT comparison; 0 = none "
                        "(default: %(default)s)")
    parser.add_argument("--iperf3", metavar="HOST[:PORT]",
                        help="run iperf3 against this iperf3 -s (when iperf3 is installed)")
    parser.add_argument("--path", default="/health",
                        help="endpoint for the HTTP round trips (default: %(default)s; any status "
                        "counts)")
    parser.add_argument("--timeout", type=float, default=10.0, help="seconds per request")
    parser.add_argument("--insecure", action="store_true", help="do not verify TLS certificates")
    add_output_arguments(parser, "net")
    parser.add_argument("--api-key-env", default="OPENAI_API_KEY", metavar="VAR",
                        help="environment variable holding the API key (default: %(default)s)")


def run(args: argparse.Namespace) -> int:
    from latscope.campaign.doctor import probe_network
    from latscope.cli.common import finish_run, open_run
    from latscope.redact import redact_url_password
    from latscope.report.findings import print_findings
    from latscope.report.text import make_console

    run = open_run(args, "net", url=redact_url_password(args.url))
    key = os.environ.get(args.api_key_env)
    report = probe_network(args.url, args.probes, timeout_s=args.timeout,
                   headers={"Authorization": f"Bearer {key}"} if key else {},
                   verify_tls=not args.insecure, stream_requests=args.stream_requests,
                   iperf3_server=args.iperf3, path=args.path)
    finish_run(run, "net.json", report.to_dict(), report.findings, as_json=args.json,
               status=f"failed: {report.error}" if report.error else "ok")
    if not args.json:
        console = make_console()
        print_findings(report.findings, console, title=f"net: {report.url}", show_ok=True)
        console.print(f"[dim]run directory: {run.path}[/dim]")
    return 1 if report.error else 0
