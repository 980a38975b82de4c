"""The dependency rules of STYLE.md hold (import-linter contracts in ``.importlinter``)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def test_pure_cores_and_dependency_direction_hold():
    lint = Path(sys.executable).with_name("lint-imports")
    result = subprocess.run([str(lint)], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]
    assert "0 broken" in result.stdout


def test_no_test_reads_files_outside_the_repository():
    """A bare clone runs the whole suite: test data is vendored under ``tests/data``, never read
    from the data folder that sits beside the checkout on the developers' machine."""
    outside = "sha" + "red"  # spelled apart so that this guard does not match itself
    needles = (f"/work/{outside}", f'"{outside}" / "testdata"', f'parent / "{outside}"', f"../{outside}")
    offenders = []
    for path in (REPO / "tests").rglob("*.py"):
        if path == Path(__file__).resolve():
            continue
        text = path.read_text(encoding="utf-8")
        if any(needle in text for needle in needles):
            offenders.append(str(path.relative_to(REPO)))
    assert offenders == []
