"""Output files named on the command line (``-o``, ``--json``): checked before the slow work, so a
typo in a folder name fails at once and not after a report was printed, and written atomically
(a temporary file in the same folder, then a rename), so a failed write never leaves half a file.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from latscope.errors import ConfigError


def check_writable(path: str | Path, flag: str) -> Path:
    """``path`` as a Path, or a one-line ConfigError saying why it cannot be written."""
    path = Path(path)
    parent = path.parent if str(path.parent) else Path(".")
    if path.is_dir():
        raise ConfigError(f"{flag} {path}: is a folder; give a file name")
    if not parent.is_dir():
        raise ConfigError(f"{flag} {path}: folder {parent} does not exist")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise ConfigError(f"{flag} {path}: folder {parent} is not writable")
    return path


def write_atomic(path: str | Path, data: bytes, flag: str) -> None:
    """Write ``data`` to ``path`` whole or not at all; an OS error becomes a one-line error."""
    path = Path(path)
    tmp = None
    try:
        with tempfile.NamedTemporaryFile(dir=path.parent if str(path.parent) else ".",
                                         prefix=f".{path.name}.", delete=False) as f:
            tmp = Path(f.name)
            f.write(data)
        os.chmod(tmp, 0o666 & ~_umask())  # as open() would create it, not the temp file's 0600
        os.replace(tmp, path)
    except OSError as exc:
        if tmp is not None:
            tmp.unlink(missing_ok=True)
        raise ConfigError(f"{flag} {path}: cannot write ({exc.strerror or exc})") from None


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask
