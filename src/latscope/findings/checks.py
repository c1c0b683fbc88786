"""The doctor's rules over the facts env/ gathered: every check run, one failing input losing no
other check's result, then one finding per id (DEBUG logging seen in the process environment and
in the log is one finding with both pieces of evidence).

A new doctor check is a function ``check(facts) -> list[Finding]`` in the findings module of its
layer, listed in ``ALL_CHECKS``.
"""

from __future__ import annotations

from latscope.env.facts import Facts
from latscope.errors import HostCheckError
from latscope.findings import envvars, gpu, hostsetup, serverconfig, servermetrics
from latscope.findings.checkbase import Check
from latscope.findings.rank import merge
from latscope.model import Finding, Severity

ALL_CHECKS: tuple[Check, ...] = (*hostsetup.HOST_CHECKS, envvars.check_env_rules, *gpu.GPU_CHECKS,
                                 *serverconfig.SERVER_CHECKS, servermetrics.check_metrics)


def check_all(facts: Facts) -> list[Finding]:
    """Every check over ``facts``, merged to one finding per id."""
    return merge([f for check in ALL_CHECKS for f in _run_check(check, facts)])


def _run_check(check: Check, facts: Facts) -> list[Finding]:
    try:
        return check(facts)
    except (OSError, ValueError, HostCheckError) as exc:
        # One unreadable or malformed input must not lose every other check's result.
        name = check.__name__.removeprefix("check_")
        return [Finding(f"doctor.{name}", Severity.SKIPPED,
                        f"skipped: {name} failed on its input: {type(exc).__name__}: {exc}",
                        reference="docs/findings.md#doctor")]
