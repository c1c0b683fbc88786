"""Secret redaction for what doctor stores or prints: environment values whose names look like
credentials (keys, tokens, passwords, auth headers), and secret-bearing command-line flags.

One rule set for flags such as ``--api-key``, in command lines and in free text (a server's log
lines): the server's process handling, the run directory and doctor all redact with it.
"""

from __future__ import annotations

import re
from typing import Sequence

REDACTED = "<redacted>"
_SECRET_NAME = re.compile(r"KEY|TOKEN|SECRET|PASSW|PWD$|AUTH|CREDENTIAL|COOKIE|SESSION|PRIVATE",
                          re.IGNORECASE)
_SECRET_VALUE = re.compile(r"^(Bearer|Basic)\s+\S+|^(sk|hf|ghp|gho|xox[bp])[-_][A-Za-z0-9]{8,}",
                           re.IGNORECASE)
# user:password@ in a URL (HTTPS_PROXY=http://bob:pw@proxy:3128, --url http://u:p@host/...).
_URL_PASSWORD = re.compile(r"(\b[a-z][a-z0-9+.-]*://[^/\s:@]*:)[^/\s@]+@", re.IGNORECASE)
# Flag values that must never reach a log, report or PID file.
_SECRET_FLAGS = re.compile(r"^--?(api-key|api_key|token|hf-token|password)(=.*)?$", re.I)
# key: value / key=value / 'key': ['v'] (vLLM logs --api-key as a list) / --api-key VALUE
_SECRET_TEXT = re.compile(r"""(?:(--(?:api-key|hf-token|token|password))(\s+)"""
                          r"""|(api[_-]?key|token|password)(['"]?\s*[:=]\s*\[?\s*['"]?))"""
                          r"""[^'",\s}\]]+""", re.I)
# Names that match the pattern above but hold no secret and matter to the checks.
_ALLOWED = {"PWD", "OLDPWD", "HIP_FORCE_DEV_KERNARG"}


def is_secret(name: str, value: str) -> bool:
    if name in _ALLOWED:
        return False
    return bool(_SECRET_NAME.search(name) or _SECRET_VALUE.search(value.strip()))


def redact_url_password(text: str) -> str:
    """Replace the password of ``scheme://user:password@host`` URLs, keeping user and host."""
    return _URL_PASSWORD.sub(lambda m: f"{m.group(1)}{REDACTED}@", text)


def redact_env(env: dict[str, str]) -> dict[str, str]:
    return {k: (REDACTED if is_secret(k, v) else redact_url_password(v)) for k, v in env.items()}


def redact_argv(argv: list[str]) -> list[str]:
    return [redact_url_password(redact_text(a)) for a in redact_cmd(argv)]


def environ_bytes(env: dict[str, str]) -> bytes:
    """The ``/proc/PID/environ`` format (NUL-terminated ``KEY=value``) of an already redacted env."""
    return b"".join(f"{k}={v}".encode() + b"\0" for k, v in env.items())


def redact_cmd(cmd: Sequence[str]) -> list[str]:
    """The command with the values of secret-bearing flags replaced by ``***``."""
    out, hide_next = [], False
    for part in cmd:
        if hide_next:
            out.append("***")
            hide_next = False
            continue
        match = _SECRET_FLAGS.match(part)
        if match and match.group(2):
            out.append(part.split("=", 1)[0] + "=***")
        else:
            out.append(part)
            hide_next = bool(match)
    return out


def redact_text(line: str) -> str:
    return _SECRET_TEXT.sub(
        lambda m: (m.group(1) or m.group(3)) + (m.group(2) or m.group(4)) + "***", line)
