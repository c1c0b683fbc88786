"""``run_doctor`` and ``probe_network``, the two conductors of the checks that need no load: env/
gathers the facts once (host, server process, GPUs, server config; the network path), the rules
in ``latscope.findings`` judge them, and the report holds the findings and the raw facts read, for
``latscope doctor``, ``latscope net`` and ``diagnose``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import orjson

from latscope.env.gather import gather_facts, raw_facts
from latscope.findings.checks import check_all
from latscope.findings.rank import sort_findings
from latscope.model import Finding
from latscope.server.hostview import HostView

if TYPE_CHECKING:
    from latscope.env.net import NetReport


@dataclass(slots=True)
class DoctorReport:
    findings: list[Finding]
    facts: dict[str, Any] = field(default_factory=dict)  # raw values read (secrets redacted)

    def to_dict(self) -> dict[str, Any]:
        return {"findings": [f.to_dict() for f in sort_findings(self.findings)],
                "facts": self.facts}

    def to_json(self) -> bytes:
        return orjson.dumps(self.to_dict(), option=orjson.OPT_INDENT_2, default=str)


def run_doctor(url: str | None = None, pid: int | None = None, log: str | None = None,
               root: str | None = None, headers: dict[str, str] | None = None) -> DoctorReport:
    from latscope.env.collect import open_root

    with open_root(root) as tree:
        facts = gather_facts(HostView(tree, label=root), url, pid, log, headers)
        return DoctorReport(check_all(facts), raw_facts(facts))


def probe_network(url: str, probes: int = 20, **options: Any) -> NetReport:
    """``env.net.probe`` (same arguments), its report's findings made by ``findings.net``."""
    # imported here: doctor alone needs neither the probes nor numpy
    from latscope.env.net import probe
    from latscope.findings.net import net_findings

    report = probe(url, probes, **options)
    report.findings = net_findings(report)
    return report
