"""The dependency rules of STYLE.md hold (import-linter contracts in ``.importlinter``)."""

from __future__ import annotations

import ast
import configparser
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
#: The contracts of the project's layout (``.importlinter``): pure cores, the dependency direction
#: between apps, and the layers of ``muse_experiments`` with no import cycle among them.
LAYOUT_CONTRACTS = {
    "pure-stats",
    "pure-assignment",
    "pure-providers",
    "experiments-independent",
    "project-layers",
    "project-acyclic",
    "routing-layers",
    "web-not-worker",
    "routing-steps",
    "worker-steps",
    "routing-acyclic",
    "simulated-dev-only",
}
MAX_MODULE_LINES = 500
#: The product packages held to :data:`MAX_MODULE_LINES` (their migrations are generated and exempt).
PRODUCT_PACKAGES = ("muse_experiments", "routing", "analytics")
#: Modules another change is splitting right now; each entry goes when its split lands.
OVER_THE_LIMIT_FOR_NOW: set[str] = set()


def test_pure_cores_and_dependency_direction_hold():
    config = configparser.ConfigParser()
    config.read(REPO / ".importlinter")
    contracts = {s.removeprefix("importlinter:contract:") for s in config.sections() if ":contract:" in s}
    assert contracts >= LAYOUT_CONTRACTS
    lint = Path(sys.executable).with_name("lint-imports")
    result = subprocess.run([str(lint)], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]
    assert "0 broken" in result.stdout


def module_sizes() -> dict[str, int]:
    """Lines of every module of the product packages, by path from the repository root."""
    return {
        path.relative_to(REPO).as_posix(): len(path.read_text(encoding="utf-8").splitlines())
        for package in PRODUCT_PACKAGES
        for path in (REPO / package).rglob("*.py")
        if "migrations" not in path.parts
    }


def test_no_product_module_is_over_500_lines():
    """No god module in ``muse_experiments``, ``routing`` or ``analytics`` (the simulated
    upstreams included); migrations are generated and exempt."""
    sizes = module_sizes()
    assert {name.split("/")[0] for name in sizes} == set(PRODUCT_PACKAGES)
    assert len(sizes) > 150
    over = {name: lines for name, lines in sizes.items() if lines > MAX_MODULE_LINES}
    assert {name: lines for name, lines in over.items() if name not in OVER_THE_LIMIT_FOR_NOW} == {}


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


#: The one module that creates or updates CompletionJob rows.
JOB_WRITER = "routing/jobs.py"
#: Manager and queryset methods that write rows (``raw`` is how a hand-written UPDATE runs).
WRITE_METHODS = frozenset(
    {"create", "update", "bulk_create", "bulk_update", "update_or_create", "get_or_create", "delete", "raw"}
)


def job_row_writes(source: str) -> list[int]:
    """Line numbers in ``source`` that write CompletionJob rows: a write method called on a chain
    starting ``CompletionJob.objects``, ``CompletionJob._meta.db_table`` (hand-written SQL), or
    ``save()``/``delete()`` on a name that says it holds a job (``job``, ``jobs``, ``existing_job``…)."""
    lines = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Attribute) and ast.unparse(node) == "CompletionJob._meta.db_table":
            lines.append(node.lineno)
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
            continue
        method, receiver = node.func.attr, node.func.value
        if method in WRITE_METHODS and ast.unparse(receiver).startswith("CompletionJob.objects"):
            lines.append(node.lineno)
        if method in {"save", "delete"} and isinstance(receiver, ast.Name) and "job" in receiver.id.lower():
            lines.append(node.lineno)
    return sorted(lines)


def test_the_job_row_finder_sees_each_kind_of_write():
    assert job_row_writes("CompletionJob.objects.filter(pk=1).update(status='failed')") == [1]
    assert job_row_writes("CompletionJob.objects.create(id=1)") == [1]
    assert job_row_writes("job.save(update_fields=['status'])") == [1]
    assert job_row_writes("t = CompletionJob._meta.db_table") == [1]
    assert job_row_writes("CompletionJob.objects.filter(pk=1).first()\njob.refresh_from_db()") == []


def test_only_routing_jobs_writes_completion_job_rows():
    """Every create or update of a CompletionJob row is in :mod:`routing.jobs` (the web side's
    queued write, the worker's claim, the drainer's final write): callers call it."""
    writes = {}
    for package in ("routing", "analytics", "muse_experiments"):
        for path in (REPO / package).rglob("*.py"):
            if "migrations" in path.parts:
                continue
            found = job_row_writes(path.read_text(encoding="utf-8"))
            if found:
                writes[str(path.relative_to(REPO))] = found
    assert len(writes.pop(JOB_WRITER)) >= 8  # the writer itself is seen writing
    assert writes == {}


def test_the_web_process_loads_no_module_of_the_worker():
    """The URLs (every API and drop-in) load nothing of ``routing.worker``: the web side publishes
    the worker's task by its registered name (``.importlinter``: web-not-worker)."""
    code = (
        "import sys, django; django.setup(); import muse_experiments.urls, muse_experiments.wsgi; "
        "print(sorted(m for m in sys.modules if m.startswith('routing.')))"
    )
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "muse_experiments.settings", "DJANGO_DEBUG": "true"}
    result = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, env=env, capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr[-2000:]
    loaded = ast.literal_eval(result.stdout.strip().splitlines()[-1])
    assert "routing.web.dispatch" in loaded and "routing.api.native" in loaded
    assert [m for m in loaded if m.startswith("routing.worker")] == []
