"""Runs a benchmark's quick mode for the smoke tests, and reads its report's tables."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def run_quick(module: str, output: Path, *arguments: str) -> str:
    """The report ``python -m <module> --quick <arguments> --output <output>`` writes, run
    in a subprocess (a benchmark configures Django its own way); its stderr if it fails."""
    done = subprocess.run(
        [sys.executable, "-m", module, "--quick", *arguments, "--output", str(output)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-5000:]
    return output.read_text()


def section(text: str, title: str) -> list[list[str]]:
    """The rows of the first table in section ``## title``, each split into its cells."""
    body = text.split(f"\n## {title}\n", 1)[1]
    table = body[body.index("\n|") + 1 :].split("\n\n", 1)[0]
    return [
        [cell.strip() for cell in row.strip("|").split(" | ")] for row in table.splitlines()[2:]
    ]
