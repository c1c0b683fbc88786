"""One findings model for every layer.

Each diagnosis has one id and one rule (one function) that makes it, whatever data it is read from:

- ``findings.server``   the server's scheduler, KV cache and logging, from its log or ``/metrics``
- ``findings.latency``  where the time of one measured run went (the TTFT decomposition's shares)
- ``findings.sweep``    capacity: the knee, SLO limits and errors along a sweep
- ``findings.trace``    the GPU (kernels, idle gaps, copies) from a profiler trace
- ``findings.net``      the network path, from ``env.net``'s probes
- doctor's checks over ``env``'s facts, run by ``findings.checks``: ``findings.hostsetup``,
  ``findings.gpu``, ``findings.envvars``, ``findings.serverconfig``, ``findings.servermetrics``

``impact`` (``findings.impact``) is measured against a small fixed set of targets shared by all
layers, so that findings measured on the same run can be ranked against each other
(``findings.rank``); severity follows from the measured impact where there is one.
"""

DOCS = "docs/findings.md"


def reference(finding_id: str, public: str = "") -> str:
    """``docs/findings.md#ID`` (the section that documents the id), then a public source."""
    return f"{DOCS}#{finding_id}" + (f"; {public}" if public else "")


from latscope.findings.impact import IMPACT_TARGETS, ImpossibleShare, make_impact, severity_for_share  # noqa: E402 (after reference: impact imports it)
from latscope.findings.rank import merge, rank  # noqa: E402

__all__ = ["DOCS", "reference", "IMPACT_TARGETS", "ImpossibleShare", "make_impact", "merge", "rank",
           "severity_for_share"]
