"""Environment-variable checks, as a table of rules (each id is documented in docs/findings.md).

Each rule names the variables it reads, which values are bad, and the finding to emit. A rule
whose diagnosis can also be read elsewhere (DEBUG logging: the log, the command line) does not
word the finding itself: its ``build`` hook is the one rule function that makes that id. The
environment is the server process's own (``/proc/PID/environ``) when doctor knows the pid, else
the environment doctor itself runs in; every finding's evidence says which.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from latscope.env.facts import Facts
from latscope.findings import reference as _ref
from latscope.findings import server as server_rules
from latscope.findings.checkbase import ev
from latscope.model import Evidence, Finding, Severity

REF = "docs/findings.md"
VLLM_ENV_DOC = "https://docs.vllm.ai/en/stable/configuration/env_vars/"
VLLM_TROUBLESHOOTING = "https://docs.vllm.ai/en/stable/usage/troubleshooting/"
HIP_DEBUG_DOC = "https://rocm.docs.amd.com/projects/HIP/en/latest/reference/env_variables.html"
NCCL_ENV_DOC = "https://docs.nvidia.com/deeplearning/nccl/user-guide/docs/env.html"
AMD_VLLM_DOC = ("https://rocm.docs.amd.com/en/docs-7.2.0/how-to/rocm-for-ai/"
                "inference-optimization/vllm-optimization.html")




def _nonzero(value: str) -> bool:
    return value.strip() not in ("", "0", "false", "False")


def _int_at_least(n: int) -> Callable[[str], bool]:
    def check(value: str) -> bool:
        return value.strip().lstrip("-").isdigit() and int(value) >= n
    return check


@dataclass(frozen=True, slots=True)
class EnvRule:
    id: str
    variables: tuple[str, ...]
    is_bad: Callable[[str], bool]
    severity: Severity
    title: str = ""
    why: str = ""
    fix: str = ""
    reference: str = ""
    layer: str = "config"
    vendor: str = ""  # only judged on hosts with this GPU vendor; "" = any host
    # The one rule function for this id when it is shared with another source: it gets the
    # evidence read and whether a value was bad, and words the finding (title..reference unused).
    build: Callable[[list[Evidence], bool], Finding] | None = None


ENV_RULES: tuple[EnvRule, ...] = (
    EnvRule("server.debug_logging", ("VLLM_LOGGING_LEVEL",), server_rules.is_debug_level,
            Severity.WARNING,
            build=lambda evidence, bad: server_rules.debug_logging_finding(evidence, debug=bad)),
    EnvRule("server.trace_function", ("VLLM_TRACE_FUNCTION",), _nonzero, Severity.CRITICAL,
            "vLLM traces every Python function call",
            "VLLM_TRACE_FUNCTION=1 logs each call of the serving process: large overhead.",
            "unset VLLM_TRACE_FUNCTION", _ref("server.trace_function", VLLM_TROUBLESHOOTING)),
    EnvRule("gpu.launch_blocking", ("CUDA_LAUNCH_BLOCKING", "HIP_LAUNCH_BLOCKING"), _nonzero,
            Severity.CRITICAL, "kernel launches are synchronous (launch blocking)",
            "Each kernel launch waits for the GPU to finish: the CPU and GPU never overlap.",
            "unset CUDA_LAUNCH_BLOCKING / HIP_LAUNCH_BLOCKING (debugging only)",
            _ref("gpu.launch_blocking", HIP_DEBUG_DOC), layer="gpu"),
    EnvRule("gpu.serialize", ("AMD_SERIALIZE_KERNEL", "AMD_SERIALIZE_COPY"), _nonzero,
            Severity.CRITICAL, "HIP serialises kernels or copies",
            "AMD_SERIALIZE_* waits before/after each kernel or copy (debugging only).",
            "unset AMD_SERIALIZE_KERNEL / AMD_SERIALIZE_COPY", _ref("gpu.serialize", HIP_DEBUG_DOC),
            layer="gpu"),
    EnvRule("gpu.amd_log_level", ("AMD_LOG_LEVEL",), _int_at_least(3), Severity.WARNING,
            "HIP runtime logging is verbose", "AMD_LOG_LEVEL>=3 logs API calls from the hot path.",
            "unset AMD_LOG_LEVEL", _ref("gpu.amd_log_level", HIP_DEBUG_DOC), layer="gpu"),
    EnvRule("gpu.nccl_debug", ("NCCL_DEBUG", "RCCL_DEBUG"),
            lambda v: v.strip().upper() in ("INFO", "TRACE"), Severity.WARNING,
            "NCCL/RCCL debug logging is on", "INFO/TRACE logs from every collective.",
            "unset NCCL_DEBUG / RCCL_DEBUG (or WARN)", _ref("gpu.nccl_debug", NCCL_ENV_DOC),
            layer="gpu"),
    EnvRule("gpu.nccl_p2p_disable", ("NCCL_P2P_DISABLE",), _nonzero, Severity.WARNING,
            "NCCL peer-to-peer is disabled",
            "All-reduce then goes through host memory instead of NVLink/XGMI/PCIe P2P.",
            "unset NCCL_P2P_DISABLE (a temporary workaround that hurts performance)",
            _ref("gpu.nccl_p2p_disable", VLLM_TROUBLESHOOTING), layer="gpu"),
    EnvRule("gpu.hip_force_dev_kernarg", ("HIP_FORCE_DEV_KERNARG",), lambda v: v.strip() == "0",
            Severity.WARNING, "HIP_FORCE_DEV_KERNARG=0",
            "Kernel arguments go through host memory: 2-3 us more per kernel launch.",
            "unset it or set 1 (default since ROCm 6.2)",
            _ref("gpu.hip_force_dev_kernarg", AMD_VLLM_DOC), layer="gpu", vendor="amd"),
)


def check_env_rules(facts: Facts) -> list[Finding]:
    findings = []
    for rule in ENV_RULES:
        if rule.vendor and facts.gpu.vendor != rule.vendor:
            continue
        read = [(var, facts.env.get(var)) for var in rule.variables]
        bad = [(var, value) for var, value in read if value is not None and rule.is_bad(value)]
        evidence = [ev(var, "(unset)" if value is None else value, facts.env_source)
                    for var, value in (bad or read)]
        if rule.build is not None:
            findings.append(rule.build(evidence, bool(bad)))
        elif bad:
            findings.append(Finding(rule.id, rule.severity, rule.title, evidence, why=rule.why,
                                    fix=rule.fix, reference=rule.reference, layer=rule.layer))
        else:
            findings.append(Finding(rule.id, Severity.OK, f"{' / '.join(rule.variables)}: fine",
                                    evidence, layer=rule.layer))
    return findings
