"""Secret redaction for what doctor stores or prints: environment values whose names look like
credentials (keys, tokens, passwords, auth headers), and secret-bearing command-line flags.

Command lines and free text reuse ``latscope.server.process``'s redaction so there is one rule set
for flags such as ``--api-key``.
"""

from __future__ import annotations

import re

from latscope.server.process import redact_cmd, redact_text

REDACTED = "<redacted>"
_SECRET_NAME = re.compile(r"KEY|TOKEN|SECRET|PASSW|PWD$|AUTH|CREDENTIAL|COOKIE|SESSION|PRIVATE",
                          re.IGNORECASE)
_SECRET_VALUE = re.compile(r"^(Bearer|Basic)\s+\S+|^(sk|hf|ghp|gho|xox[bp])[-_][A-Za-z0-9]{8,}",
                           re.IGNORECASE)
# user:password@ in a URL (HTTPS_PROXY=http://bob:pw@proxy:3128, --url http://u:p@host/...).
_URL_PASSWORD = re.compile(r"(\b[a-z][a-z0-9+.-]*://[^/\s:@]*:)[^/\s@]+@", re.IGNORECASE)
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
