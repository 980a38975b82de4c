"""docker-compose.yml follows the Compose specification (checked with check-jsonschema's vendored
compose-spec schema: Docker's engine is not on this machine) and runs the Procfile's process types;
secrets can come from files."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
import yaml

from muse_experiments.infra.prodshape import read_procfile

REPO = Path(__file__).resolve().parent.parent
CHECK = shutil.which("check-jsonschema", path=str(Path(sys.executable).parent)) or "check-jsonschema"


def validate(path: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [CHECK, "--builtin-schema", "vendor.compose-spec", str(path)], capture_output=True, text=True
    )


def test_docker_compose_yml_is_valid_compose():
    result = validate(REPO / "docker-compose.yml")
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_schema_check_rejects_an_invalid_compose_file(tmp_path):
    bad = tmp_path / "docker-compose.yml"
    bad.write_text("services:\n  web:\n    image: x\n    restart: sometimes\n    portz: [1]\n")
    result = validate(bad)
    assert result.returncode == 1
    assert "portz" in result.stdout or "restart" in result.stdout


def test_compose_services_run_procfile_types_and_one_beat():
    compose = yaml.safe_load((REPO / "docker-compose.yml").read_text())
    types = read_procfile()
    used = {}
    for name, service in compose["services"].items():
        command = service.get("command") or []
        if command[:4] == ["python", "-m", "muse_experiments.infra.prodshape", "exec"]:
            used[name] = command[4]
    assert used == {
        "web": "web", "worker": "worker", "shadow": "shadow", "beat": "beat", "drainer": "drainer"
    }  # fmt: skip
    assert set(used.values()) == set(types)  # every process type of the Procfile has a service
    assert compose["services"]["beat"]["deploy"]["replicas"] == 1


@pytest.mark.parametrize("name", ["SECRET_KEY", "DATABASE_URL"])
def test_settings_read_secrets_from_files(tmp_path, name):
    value = "sqlite:////tmp/from-file.sqlite3" if name == "DATABASE_URL" else "k" * 50
    secret = tmp_path / "secret"
    secret.write_text(value)
    env = {k: v for k, v in os.environ.items() if k not in (name, "DJANGO_DEBUG")}
    env |= {f"{name}_FILE": str(secret), "DJANGO_SETTINGS_MODULE": "muse_experiments.settings"}
    env.setdefault("SECRET_KEY", "x" * 50)
    probe = (
        "import django; from django.conf import settings; django.setup(); "
        f"print(settings.SECRET_KEY if {name!r} == 'SECRET_KEY' else settings.DATABASES['default']['NAME'])"
    )
    out = subprocess.run([sys.executable, "-c", probe], env=env, cwd=REPO, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip() == (value if name == "SECRET_KEY" else "/tmp/from-file.sqlite3")


def dockerignored(path: str, patterns: list[str]) -> bool:
    """Whether Docker leaves ``path`` (relative, ``/``-separated) out of the build context under
    ``patterns`` (the lines of ``.dockerignore``): later lines win, ``!`` re-includes, ``**``
    matches any number of folders, and a matched folder takes everything below it with it."""
    excluded = False
    for raw in patterns:
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        keep = line.startswith("!")
        pattern = line.removeprefix("!").strip("/")
        parts = path.split("/")
        prefixes = ["/".join(parts[: i + 1]) for i in range(len(parts))]
        regex = (
            re.escape(pattern).replace(r"\*\*/", "(?:.*/)?").replace(r"\*\*", ".*").replace(r"\*", "[^/]*")
        )
        if any(re.fullmatch(regex, prefix) for prefix in prefixes):
            excluded = not keep
    return excluded


def image_files() -> set[str]:
    """The files of this checkout the Dockerfile's ``COPY`` lines put in the image: each source
    (a file, or a folder's files) as the build context holds it, less what ``.dockerignore``
    leaves out."""
    patterns = (REPO / ".dockerignore").read_text().splitlines()
    sources = []
    for line in (REPO / "Dockerfile").read_text().splitlines():
        words = line.split()
        if words[:1] == ["COPY"] and not any(w.startswith("--from") for w in words):
            sources += [REPO / w for w in words[1:-1]]
    paths = [p for s in sources for p in ([s] if s.is_file() else s.rglob("*")) if p.is_file()]
    relative = {p.relative_to(REPO).as_posix() for p in paths}
    return {f for f in relative if not dockerignored(f, patterns)}


def test_the_dockerignore_matcher_follows_dockers_rules():
    assert dockerignored("routing/simulated/server.py", ["routing/simulated"])
    assert dockerignored("a/b/__pycache__/x.pyc", ["**/__pycache__"])
    assert not dockerignored("routing/simulated/server.py", ["routing/simulated", "!routing/simulated"])
    assert not dockerignored("routing/simulator.py", ["routing/simulated"])


def test_the_image_leaves_the_simulated_upstreams_out():
    files = image_files()
    assert "routing/providers/base.py" in files and "manage.py" in files
    assert "routing/transcripts/services.py" in files
    assert [f for f in files if f.startswith("routing/simulated/")] == []
    # no process type of the image starts them
    assert "routing.simulated" not in (REPO / "Procfile").read_text()
    assert "routing.simulated" not in (REPO / "docker-compose.yml").read_text()


def test_the_wheel_leaves_the_simulated_upstreams_out():
    """The packages ``pip wheel .`` puts in the wheel, found as setuptools finds them with
    pyproject's ``[tool.setuptools.packages.find]`` (building a wheel here would be too slow)."""
    from setuptools import find_packages

    config = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]
    found = config["packages"]["find"]
    packages = set(find_packages(str(REPO), include=found["include"], exclude=found.get("exclude", ())))
    assert {"routing", "routing.providers", "routing.pipeline", "routing.shadow"} <= packages
    assert {"muse_experiments.infra", "analytics.stats", "routing.migrations"} <= packages
    assert [p for p in packages if p.startswith("routing.simulated")] == []
    assert not [p for p in packages if p.split(".")[0] not in ("muse_experiments", "routing", "analytics")]
    # nothing comes back as package data (a stale egg-info's file list would bring them back)
    assert config["include-package-data"] is False
