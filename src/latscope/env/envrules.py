"""Environment-variable checks (vllm-facts.md section 6, items 19-28), as a table of rules.

Each rule names the variables it reads, which values are bad, and the finding to emit. The
environment is the server process's own (``/proc/PID/environ``) when doctor knows the pid, else
the environment doctor itself runs in; every finding's evidence says which.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from latscope.env.facts import Facts, ev
from latscope.model import Finding, Severity

VLLM_FACTS = "vllm-facts.md section 3-4"
HIP_DEBUG_DOC = "ROCm/HIP docs, debug_hip_env.rst; vllm docs/usage/troubleshooting.md"


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
    title: str
    why: str
    fix: str
    reference: str
    layer: str = "config"
    vendor: str = ""  # only judged on hosts with this GPU vendor; "" = any host


ENV_RULES: tuple[EnvRule, ...] = (
    EnvRule("server.logging_level", ("VLLM_LOGGING_LEVEL",), lambda v: v.strip().upper() == "DEBUG",
            Severity.WARNING, "vLLM logs at DEBUG level",
            "DEBUG writes lines per scheduler step and per request from the serving loop.",
            "unset VLLM_LOGGING_LEVEL (default INFO)", f"{VLLM_FACTS}; checklist #19"),
    EnvRule("server.trace_function", ("VLLM_TRACE_FUNCTION",), _nonzero, Severity.CRITICAL,
            "vLLM traces every Python function call",
            "VLLM_TRACE_FUNCTION=1 logs each call of the serving process: large overhead.",
            "unset VLLM_TRACE_FUNCTION", f"{VLLM_FACTS}; checklist #19"),
    EnvRule("gpu.launch_blocking", ("CUDA_LAUNCH_BLOCKING", "HIP_LAUNCH_BLOCKING"), _nonzero,
            Severity.CRITICAL, "kernel launches are synchronous (launch blocking)",
            "Each kernel launch waits for the GPU to finish: the CPU and GPU never overlap.",
            "unset CUDA_LAUNCH_BLOCKING / HIP_LAUNCH_BLOCKING (debugging only)",
            f"{HIP_DEBUG_DOC}; checklist #21", layer="gpu"),
    EnvRule("gpu.serialize", ("AMD_SERIALIZE_KERNEL", "AMD_SERIALIZE_COPY"), _nonzero,
            Severity.CRITICAL, "HIP serialises kernels or copies",
            "AMD_SERIALIZE_* waits before/after each kernel or copy (debugging only).",
            "unset AMD_SERIALIZE_KERNEL / AMD_SERIALIZE_COPY", f"{HIP_DEBUG_DOC}; checklist #21",
            layer="gpu"),
    EnvRule("gpu.amd_log_level", ("AMD_LOG_LEVEL",), _int_at_least(3), Severity.WARNING,
            "HIP runtime logging is verbose", "AMD_LOG_LEVEL>=3 logs API calls from the hot path.",
            "unset AMD_LOG_LEVEL", f"{HIP_DEBUG_DOC}; checklist #22", layer="gpu"),
    EnvRule("gpu.nccl_debug", ("NCCL_DEBUG", "RCCL_DEBUG"),
            lambda v: v.strip().upper() in ("INFO", "TRACE"), Severity.WARNING,
            "NCCL/RCCL debug logging is on", "INFO/TRACE logs from every collective.",
            "unset NCCL_DEBUG / RCCL_DEBUG (or WARN)", f"{VLLM_FACTS}; checklist #22", layer="gpu"),
    EnvRule("gpu.nccl_p2p_disable", ("NCCL_P2P_DISABLE",), _nonzero, Severity.WARNING,
            "NCCL peer-to-peer is disabled",
            "All-reduce then goes through host memory instead of NVLink/XGMI/PCIe P2P.",
            "unset NCCL_P2P_DISABLE (a temporary workaround that hurts performance)",
            "vllm docs/usage/troubleshooting.md; checklist #28", layer="gpu"),
    EnvRule("gpu.hip_force_dev_kernarg", ("HIP_FORCE_DEV_KERNARG",), lambda v: v.strip() == "0",
            Severity.WARNING, "HIP_FORCE_DEV_KERNARG=0",
            "Kernel arguments go through host memory: 2-3 us more per kernel launch.",
            "unset it or set 1 (default since ROCm 6.2)",
            "ROCm mi300x.rst; checklist #23", layer="gpu", vendor="amd"),
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
        if bad:
            findings.append(Finding(rule.id, rule.severity, rule.title, evidence, why=rule.why,
                                    fix=rule.fix, reference=rule.reference, layer=rule.layer))
        else:
            findings.append(Finding(rule.id, Severity.OK, f"{' / '.join(rule.variables)}: fine",
                                    evidence, layer=rule.layer))
    return findings
