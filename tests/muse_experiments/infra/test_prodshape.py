"""The production shape: the Procfile times a formation, and a supervisor that restarts a killed
process and stops every process group it started."""

from __future__ import annotations

import os
import signal
import sys
import time

import pytest

from muse_experiments.infra.prodshape import (
    PROCFILE,
    Process,
    Supervisor,
    parse_formation,
    processes,
    read_procfile,
    signal_group,
)


def test_the_repository_procfile_has_web_worker_beat_and_the_drainer():
    types = read_procfile(PROCFILE)
    assert list(types) == ["web", "worker", "shadow", "beat", "drainer"]
    # shadow tests' calls: their own queue, at SCHED_IDLE and nice 19 below the primaries (routing.shadow;
    # tests/routing/shadow/test_worker_priority.py starts it)
    assert (
        types["shadow"].startswith(
            "nice -n 19 env RECORDS_DRAINER=false WORKER_IDLE_PRIORITY=true SHADOW_PAIR_FLUSH_S=1 SHADOW_MIN_IDLE_CPU=0.6 celery "
        )
        and "-Q shadow " in types["shadow"]
    )
    assert types["worker"].startswith("env RECORDS_DRAINER=false celery ")  # the drainer process drains
    assert types["drainer"] == "python manage.py drain_records"
    assert types["web"].startswith("gunicorn muse_experiments.wsgi")
    assert "--config python:muse_experiments.infra.gunicorn_conf" in types["web"]
    assert "-n ${MUSE_PROCESS_NAME:-worker}@%h" in types["worker"]  # replicas need distinct node names


def test_a_formation_replicates_types_and_refuses_nonsense(tmp_path):
    procfile = tmp_path / "Procfile"
    procfile.write_text("# c\nweb: serve\n\nworker: work --fast\nbeat: tick\n")
    procs = processes(procfile, "worker=3, beat=0")
    assert [(p.name, p.type, p.command) for p in procs] == [
        ("web.1", "web", "serve"),
        ("worker.1", "worker", "work --fast"),
        ("worker.2", "worker", "work --fast"),
        ("worker.3", "worker", "work --fast"),
    ]
    types = read_procfile(procfile)
    with pytest.raises(ValueError, match="not a Procfile type"):
        parse_formation("wrker=2", types)
    with pytest.raises(ValueError, match="non-negative integer"):
        parse_formation("worker=-1", types)


def test_the_default_formation_runs_one_process_of_each_type():
    types = read_procfile()
    assert parse_formation("", types) == dict.fromkeys(types, 1)
    assert [p.name for p in processes(formation="beat=0") if p.type == "worker"] == ["worker.1"]


def wait_for(condition, timeout_s=10.0):
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


def test_the_supervisor_restarts_a_killed_process_and_stops_all_groups(tmp_path):
    sleeper = f"{sys.executable} -c 'import os, time; print(os.environ[\"MUSE_PROCESS_NAME\"], flush=True); time.sleep(120)'"
    sup = Supervisor(
        [Process("a.1", "a", sleeper), Process("b.1", "b", sleeper)],
        run_dir=tmp_path,
        output=tmp_path / "logs",
    )
    sup.start_all()
    try:
        first = int((tmp_path / "a.1.pid").read_text())
        os.killpg(first, signal.SIGKILL)
        wait_for(lambda: sup.children["a.1"].poll() is not None)
        sup.poll()
        second = int((tmp_path / "a.1.pid").read_text())
        assert second != first and sup.children["a.1"].poll() is None
        assert sup.restarts == {"a.1": 1, "b.1": 0}
        assert (tmp_path / "prometheus").is_dir()
        wait_for(lambda: (tmp_path / "logs" / "b.1.log").read_text() == "b.1\n")
    finally:
        sup.stop_all(timeout_s=5)
    assert all(c.poll() is not None for c in sup.children.values())
    assert not (tmp_path / "a.1.pid").exists()


def test_exec_refuses_a_type_the_procfile_does_not_have():
    from muse_experiments.infra.prodshape import exec_type

    with pytest.raises(ValueError, match="not a Procfile type"):
        exec_type("wrker")


@pytest.mark.slow
def test_the_procfile_worker_logs_celerys_own_info_lines_as_json(tmp_path):
    """The worker line runs at ``-l info``: Celery's INFO lines (connected, ready, task received and
    succeeded) are logged, through our JSON formatter like every other line."""
    import json
    import subprocess
    import threading

    from muse_experiments.infra.private_redis import ensure_running

    env = {k: v for k, v in os.environ.items() if k not in ("REDIS_URL", "DJANGO_DEBUG", "CI")}
    env |= {
        "SECRET_KEY": "k" * 50,
        "DATABASE_URL": f"sqlite:///{tmp_path / 'db.sqlite3'}",
        "MUSE_VAR_DIR": str(tmp_path),  # a private Redis server (below) and state of this test's own
        "LOG_FORMAT": "json",
        "MUSE_PROCESS_NAME": "worker.1",
    }
    redis_server = ensure_running(tmp_path / "redis")  # where the settings look without REDIS_URL
    worker = subprocess.Popen(
        [sys.executable, "-m", "muse_experiments.infra.prodshape", "exec", "worker"],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    records = []
    # no "ready" line within 60 s: the worker is stopped, its stderr ends and the asserts fail
    watchdog = threading.Timer(60, signal_group, (worker.pid, signal.SIGKILL))
    watchdog.start()
    try:
        for line in worker.stderr:
            if line.startswith("{"):
                records.append(json.loads(line))
                if records[-1]["msg"].endswith(" ready."):
                    break
    finally:
        watchdog.cancel()
        signal_group(worker.pid, signal.SIGTERM)
        worker.wait(timeout=30)
        worker.stderr.close()
        redis_server.stop()
    assert records, "the worker logged no JSON line"
    ready = records[-1]
    assert ready["msg"].startswith("worker.1@") and ready["msg"].endswith(" ready.")
    assert (ready["level"], ready["logger"], ready["process"]) == ("INFO", "celery.apps.worker", "worker.1")
    assert any(r["logger"] == "celery.worker.consumer.connection" and r["level"] == "INFO" for r in records)


def test_gunicorn_logs_no_access_line_under_the_production_logging_config(monkeypatch, capfd):
    """With JSON logs (the production default) gunicorn's access lines go to ``gunicorn.access``
    at WARNING, i.e. nowhere: Django writes the access lines (:mod:`muse_experiments.infra.observability`)."""
    import importlib
    import logging

    from gunicorn.config import Config
    from gunicorn.glogging import Logger

    from muse_experiments.infra import gunicorn_conf

    monkeypatch.setenv("LOG_FORMAT", "json")
    try:
        conf = importlib.reload(gunicorn_conf)
        cfg = Config()
        cfg.set("logconfig_dict", conf.logconfig_dict)
        log = Logger(cfg)
    finally:
        monkeypatch.undo()
        importlib.reload(gunicorn_conf)
    assert not log.access_log.isEnabledFor(logging.INFO)
    assert log.error_log.isEnabledFor(logging.INFO)
    capfd.readouterr()
    log.access_log.info("GET / 200")
    log.error_log.info("worker booted")
    err = capfd.readouterr().err
    assert "GET / 200" not in err and "worker booted" in err


def test_gunicorn_parses_requests_with_its_c_parser_under_the_production_config():
    """``gunicorn_h1c`` (gunicorn's "fast" extra) is installed and nothing in
    :mod:`muse_experiments.infra.gunicorn_conf` turns on a compatibility flag that sends gunicorn back
    to its pure-Python parser (``http_parser = "auto"`` falls back silently)."""
    from gunicorn.config import Config
    from gunicorn.http import message

    from muse_experiments.infra import gunicorn_conf

    cfg = Config()
    for name, value in vars(gunicorn_conf).items():
        if name in cfg.settings:
            cfg.set(name, value)
    assert cfg.http_parser == "auto"
    assert message._check_fast_parser(cfg) is True


def test_the_production_web_server_runs_the_worker_safe_from_slow_clients(monkeypatch):
    """:mod:`muse_experiments.infra.gunicorn_conf` selects the worker and hands it its limits, read from
    the environment; the Procfile's web line names no worker class (``-k`` would override it)."""
    import importlib
    from types import SimpleNamespace

    from gunicorn.config import Config

    from muse_experiments.infra import gunicorn_conf
    from muse_experiments.infra.gunicorn_worker import BufferingThreadWorker, ClientLimits

    assert not {"-k", "--worker-class"} & set(read_procfile()["web"].split())
    monkeypatch.setenv("WEB_HEADER_TIMEOUT_S", "3")
    monkeypatch.setenv("WEB_SEND_TIMEOUT_S", "7.5")
    conf = importlib.reload(gunicorn_conf)
    try:
        cfg = Config()
        for name, value in vars(conf).items():
            if name in cfg.settings:
                cfg.set(name, value)
        assert cfg.worker_class is BufferingThreadWorker
        worker = SimpleNamespace()
        cfg.post_fork(None, worker)
        assert worker.limits == ClientLimits(
            header_timeout_s=3,
            body_timeout_s=20,
            body_min_rate=4096,
            buffer_bytes=1024 * 1024,
            send_timeout_s=7.5,
        )
    finally:
        monkeypatch.undo()
        importlib.reload(gunicorn_conf)
