"""docker-compose.yml follows the Compose specification (checked with check-jsonschema's vendored
compose-spec schema: Docker's engine is not on this machine) and runs the Procfile's process types;
secrets can come from files."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
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
