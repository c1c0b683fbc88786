"""`latscope net`: DNS, TCP, TLS, HTTP round trips (new vs reused connections), streamed delivery
gaps and iperf3, ending with the network's share of the server's measured TTFT."""

from __future__ import annotations

import argparse
import os

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
    parser.add_argument("--json", metavar="FILE", help="also write the report (raw samples) as JSON")
    parser.add_argument("--api-key-env", default="OPENAI_API_KEY", metavar="VAR",
                        help="environment variable holding the API key (default: %(default)s)")


def run(args: argparse.Namespace) -> int:

    import orjson

    from latscope.cli.output import check_writable, write_atomic
    from latscope.env.net import probe
    from latscope.report.findings import print_findings
    from latscope.report.text import make_console

    if args.json:
        check_writable(args.json, "--json")  # before the probes, not after them

    key = os.environ.get(args.api_key_env)
    report = probe(args.url, args.probes, timeout_s=args.timeout,
                   headers={"Authorization": f"Bearer {key}"} if key else {},
                   verify_tls=not args.insecure, stream_requests=args.stream_requests,
                   iperf3_server=args.iperf3, path=args.path)
    if args.json:
        write_atomic(args.json, orjson.dumps(report.to_dict(), option=orjson.OPT_INDENT_2),
                     "--json")
    console = make_console()
    print_findings(report.findings, console, title=f"net: {report.url}", show_ok=True)
    return 1 if report.error else 0
