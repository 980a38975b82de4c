"""Test-wide fixtures: real services when present, a clear skip (or, under CI, a failure) when not.

Redis is always there: ``REDIS_URL`` when set, else the session's private server (started by
:func:`pytest_sessionstart` on a socket under ``var/test/``, apart from a demo's, and stopped at
the session's end). Tests that need PostgreSQL ask for the ``postgres`` fixture: on a laptop
without it they skip and say why; with ``CI=true`` a missing service fails the run instead, so CI
can never go green by skipping.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")


def need_service(name: str, why: str) -> None:
    """Skip (laptop) or fail (CI) because a service is missing."""
    message = f"{name} unavailable: {why}"
    if IN_CI:
        pytest.fail(f"{message} (CI=true: missing services fail instead of skipping)", pytrace=False)
    pytest.skip(message)


_private_redis: list = []


def pytest_sessionstart(session):
    """Start the session's private Redis server unless ``REDIS_URL`` names one (nothing to do for
    the Django-free tests run with ``-p no:django``)."""
    from django.conf import settings

    if not settings.configured or not settings.PRIVATE_REDIS_DIR:
        return
    from muse_experiments.infra.private_redis import ensure_running

    _private_redis.append(ensure_running(settings.PRIVATE_REDIS_DIR))


@pytest.fixture(scope="session")
def redis_url() -> str:
    """The Redis URL the platform uses (the settings' REDIS_URL), answering ``PING``."""
    from django.conf import settings

    from muse_experiments.infra.redis_client import redis_client

    redis_client().ping()
    return settings.REDIS_URL


@pytest.fixture
def redis_store(redis_url, settings):
    """The reasoning store (:mod:`routing.reasoning_store`) on real Redis, emptied before and
    after the test; yields a client of that Redis."""
    import redis

    settings.REASONING_STORE_URL = redis_url
    client = redis.Redis.from_url(redis_url)

    def clean():
        for key in client.scan_iter("muse:reasoning*"):
            client.delete(key)

    clean()
    yield client
    clean()


@pytest.fixture(autouse=True)
def no_claims_of_other_tests() -> None:
    """Each test starts with no job claim in Redis's lease set (``routing.state.claims.LEASES``), no job
    published unclaimed or lost, and no worker heartbeat on record: another test's would otherwise
    be reaped (or published again) into this test's database. (Nothing to do for the
    Django-free tests run with ``-p no:django``.)"""
    from django.conf import settings

    if not settings.configured:
        return
    from muse_experiments.infra.redis_client import redis_client
    from routing.state.claims import LEASES, LOST_JOBS, QUEUED_JOBS, WORKERS

    redis_client().delete(LEASES, QUEUED_JOBS, LOST_JOBS, WORKERS)


@pytest.fixture(autouse=True)
def _no_shadow_counters_of_other_tests(no_claims_of_other_tests):
    """Each test starts with no shadow-test counter in Redis (spend, drops, job claims,
    :mod:`routing.shadow.budget`): the test database starts empty each session, so a test's ids
    and keys come again in the next session, while Redis keeps the last one's counters."""
    from django.apps import apps

    if not apps.ready:  # pure-core tests may run with -p no:django
        return
    _delete_redis_keys("muse:shadow:*")


@pytest.fixture(autouse=True)
def _no_auth_failures_of_other_tests(no_claims_of_other_tests):
    """Each test starts with no failed authentication counted (``muse_experiments.api.auth_failures``):
    the test client's requests all come from 127.0.0.1, and other tests' 401s would add up to a 429."""
    from django.apps import apps

    if not apps.ready:  # pure-core tests may run with -p no:django
        return
    from muse_experiments.api import auth_failures

    auth_failures.forget_all()
    _delete_redis_keys(auth_failures.KEY_PREFIX + "*")


def _delete_redis_keys(pattern: str) -> None:
    """Delete every key matching ``pattern`` in the platform's Redis (this test process's database)."""
    from muse_experiments.infra.redis_client import redis_client

    client = redis_client()
    keys = list(client.scan_iter(match=pattern, count=1000))
    if keys:
        client.delete(*keys)


@pytest.fixture(scope="session")
def django_db_setup(django_db_setup, django_db_blocker):
    """pytest-django's test databases, with the other sessions on a PostgreSQL test database gone
    before it is dropped: a worker subprocess a test stopped may still be closing its connection,
    and a daemon thread of this process (a lease keeper, a drainer) keeps its own until the process
    exits; ``DROP DATABASE`` refuses either ("is being accessed by other users")."""
    yield
    from django.db import connections

    with django_db_blocker.unblock():
        end_other_sessions()
        connections.close_all()


def end_other_sessions(wait_s: float = 10.0) -> list[int]:
    """Wait up to ``wait_s`` for the other sessions on the (PostgreSQL) test database to end, then
    end the rest, naming them on stderr; returns the pids it ended. Nothing to do on SQLite or when
    no test database was made (no test of the session asked for one)."""
    import sys
    import time

    from django.db import connection
    from django.db.backends.base.creation import TEST_DATABASE_PREFIX

    if connection.vendor != "postgresql" or not connection.settings_dict["NAME"].startswith(
        TEST_DATABASE_PREFIX
    ):
        return []
    query = (
        "SELECT pid, application_name, state, left(query, 120) FROM pg_stat_activity"
        " WHERE datname = current_database() AND pid <> pg_backend_pid()"
    )
    deadline = time.monotonic() + wait_s
    with connection.cursor() as cursor:
        cursor.execute(query)
        others = cursor.fetchall()
        while others and time.monotonic() < deadline:
            time.sleep(0.2)
            cursor.execute(query)
            others = cursor.fetchall()
        for pid, application, state, last in others:
            print(
                f"ending a test-database session left open: {pid} {application!r} {state} {last!r}",
                file=sys.stderr,
            )
            cursor.execute("SELECT pg_terminate_backend(%s)", [pid])
    return [pid for pid, *_ in others]


@pytest.fixture(scope="session")
def postgres(django_db_setup, django_db_blocker) -> None:
    """Require that the test database is PostgreSQL."""
    from django.db import connection

    if connection.vendor != "postgresql":
        need_service("PostgreSQL", "DATABASE_URL does not point at PostgreSQL")


@pytest.fixture(scope="session")
def django_db_modify_db_settings(django_db_modify_db_settings_parallel_suffix):
    """SQLite test databases live in a file, so worker subprocesses can open the same one (one
    file per pytest-xdist process; other databases get pytest-django's ``_gw<n>`` suffix)."""
    from django.conf import settings

    db = settings.DATABASES["default"]
    if settings.SQLITE:
        xdist = os.environ.get("PYTEST_XDIST_WORKER")
        name = Path(settings.VAR_DIR) / (f"test-{xdist}.sqlite3" if xdist else "test.sqlite3")
        for leftover in name.parent.glob(name.name + "*"):  # WAL/SHM files of an earlier run
            leftover.unlink()
        db.setdefault("TEST", {})["NAME"] = str(name)


@pytest.fixture(autouse=True)
def _fresh_config_snapshots():
    """Each test starts with empty configuration caches (test rollbacks reuse version numbers)."""
    from django.apps import apps

    if not apps.ready:  # pure-core tests may run with -p no:django
        yield
        return
    from muse_experiments.infra.config_version import invalidate_all

    invalidate_all()
    yield
    invalidate_all()


UPSTREAM_KEYS = {
    "native": "sk-test-native-0123456789",
    "azure": "test-azure-0123456789",
    "anthropic": "sk-ant-test-0123456789",
    "openai": "sk-test-openai-0123456789",
}
CREDENTIAL_ENV = {
    "AVOCADO_API_KEY": UPSTREAM_KEYS["native"],
    "AZURE_OPENAI_API_KEY": UPSTREAM_KEYS["azure"],
    "ANTHROPIC_API_KEY": UPSTREAM_KEYS["anthropic"],
}


def allow_simulated_upstream(url: str) -> str:
    """Let provider credentials go to the simulated upstream at ``url``, as ``SIMULATED_UPSTREAMS``
    does (routing.guards.credentials): its ``host:port`` joins the setting in this process (the list
    itself, so it holds whatever a test's ``settings`` fixture overrides) and in the environment
    that worker subprocesses inherit. Returns the entry (see :func:`forget_simulated_upstream`)."""
    from django.conf import settings

    entry = url.split("://", 1)[-1].split("/", 1)[0]
    if entry not in settings.SIMULATED_UPSTREAMS:
        settings.SIMULATED_UPSTREAMS.append(entry)
    os.environ["SIMULATED_UPSTREAMS"] = ",".join(settings.SIMULATED_UPSTREAMS)
    return entry


def forget_simulated_upstream(entry: str) -> None:
    """Undo :func:`allow_simulated_upstream`."""
    from django.conf import settings

    if entry in settings.SIMULATED_UPSTREAMS:
        settings.SIMULATED_UPSTREAMS.remove(entry)
    os.environ["SIMULATED_UPSTREAMS"] = ",".join(settings.SIMULATED_UPSTREAMS)


@pytest.fixture(scope="session", autouse=True)
def _unused_upstream_allowed():
    """The default seed's address (``tests.factories.UNUSED_UPSTREAM``) is a simulated upstream
    for the whole session."""
    from django.apps import apps

    if apps.ready:  # (not in the Django-free runs with -p no:django)
        from tests.factories import UNUSED_UPSTREAM

        allow_simulated_upstream(UNUSED_UPSTREAM)
    yield


@pytest.fixture(scope="session")
def upstreams_server():
    """Simulated upstreams over real HTTP, knowing every seeded model, for the whole session
    (credentials may go there: :func:`allow_simulated_upstream`)."""
    from routing.catalogue import endpoint_seeds
    from routing.simulated import FakeUpstreams

    fake = FakeUpstreams(api_keys=UPSTREAM_KEYS)
    fake.add_models(*(e.upstream_model for e in endpoint_seeds()))
    fake.start()
    entry = allow_simulated_upstream(fake.url)
    yield fake
    forget_simulated_upstream(entry)
    fake.stop()


@pytest.fixture
def upstreams(upstreams_server, monkeypatch):
    """The simulated upstreams, reset, with provider credentials in this process's environment."""
    upstreams_server.reset(scenarios=True)
    for name, value in CREDENTIAL_ENV.items():
        monkeypatch.setenv(name, value)
    return upstreams_server


def database_url_for_subprocess() -> str:
    """A DATABASE_URL that opens the *test* database this process uses."""
    from django.db import connection

    s = connection.settings_dict
    if connection.vendor == "sqlite":
        return f"sqlite:///{s['NAME']}"
    if connection.vendor == "postgresql":
        auth = s["USER"] + (f":{s['PASSWORD']}" if s.get("PASSWORD") else "")
        return f"postgres://{auth}@{s['HOST'] or '127.0.0.1'}:{s['PORT'] or 5432}/{s['NAME']}"
    raise RuntimeError(f"no subprocess URL for {connection.vendor}")


def start_celery_worker(
    env: dict[str, str],
    log_path: Path,
    *,
    name: str,
    queues: str = "completions,analytics,shadow",
    concurrency: int = 4,
):
    """Start a real ``celery worker`` (thread pool) with ``env``, its output in ``log_path``, in
    its own process group; return the Popen once it logs ``ready.`` (the test fails if it exits
    first or takes over 60 s)."""
    import subprocess
    import sys
    import time

    with open(log_path, "wb") as log:
        proc = subprocess.Popen(
            [
                sys.executable, "-m", "celery", "-A", "muse_experiments", "worker",
                "-Q", queues, "--pool", "threads", "--concurrency", str(concurrency),
                "-l", "info", "--without-gossip", "--without-mingle", "--without-heartbeat",
                "-n", f"{name}-{os.getpid()}@%h",
            ],
            env=env, cwd=REPO, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip
    deadline = time.monotonic() + 60
    while b"ready." not in log_path.read_bytes():
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            pytest.fail(f"celery worker {name} did not start:\n{log_path.read_text()[-3000:]}")
        time.sleep(0.1)
    return proc


def stop_process_group(proc, sig: int | None = None) -> None:
    """Send ``sig`` (default SIGTERM: a worker's warm shutdown, running tasks finish) to the
    process's group, then SIGKILL if it has not exited within 15 s."""
    import signal
    import subprocess

    if proc is None or proc.poll() is not None:
        return
    os.killpg(proc.pid, signal.SIGTERM if sig is None else sig)
    try:
        proc.wait(timeout=15)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


WORKER_FIXTURE = "celery_worker_process"
#: The test pytest runs after the current one (``pytest_runtest_protocol``'s ``nextitem``).
_next_item: list = [None]


class _SharedWorker:
    """The ``celery worker`` process of the worker tests, kept from one such test to the next.

    Starting one costs 3-8 s (imports, broker connection), paid by each of ~50 tests before; a run
    of consecutive worker tests now shares one. It is kept only when it is provably idle after a
    test (no task message queued, none unacknowledged: every task is ``acks_late``; no call record
    buffered), before that test's database is flushed (the configuration version lives in Redis
    and only grows, so the worker's snapshots cannot mistake a flushed and re-seeded database for
    the one they cached). It runs with
    ``CONFIG_REFRESH_INTERVAL_S=0`` so each test's configuration is read on its first call, and
    is stopped before any test that does not ask for it (no stray worker runs a test's tasks).
    """

    def __init__(self) -> None:
        self.proc = None
        self.env_key: tuple = ()

    def start(self, env: dict[str, str]) -> None:
        from django.conf import settings

        self.proc = start_celery_worker(env, Path(settings.VAR_DIR) / "worker-test.log", name="test")

    def stop(self) -> None:
        """SIGTERM (a warm shutdown: running tasks finish), then SIGKILL after 15 s."""
        proc, self.proc = self.proc, None
        stop_process_group(proc)

    def idle(self, timeout_s: float = 5.0) -> bool:
        """Wait up to ``timeout_s`` until the broker holds no message for the worker, none is
        unacknowledged (received, not finished) and no call record is buffered."""
        import time

        from kombu.transport.redis import Channel

        from muse_experiments.infra.queues import Queue
        from muse_experiments.infra.redis_client import redis_client
        from routing.worker import drainer

        client = redis_client()
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            pipe = client.pipeline(transaction=False)
            pipe.llen(str(Queue.COMPLETIONS)).llen(str(Queue.ANALYTICS)).hlen(Channel.unacked_key)
            if not any(pipe.execute()) and not drainer.pending():
                return True
            time.sleep(0.05)
        return False


_shared_worker = _SharedWorker()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    """Note which test comes next; stop the shared worker before a test that does not use it."""
    _next_item[0] = nextitem
    if WORKER_FIXTURE not in getattr(item, "fixturenames", ()):
        _shared_worker.stop()
    yield


def pytest_sessionfinish(session, exitstatus):
    _shared_worker.stop()
    while _private_redis:
        _private_redis.pop().stop()


@pytest.fixture
def celery_worker_process(upstreams):
    """A real ``celery worker`` process on the test database and the configured broker.

    Yields the Popen. Consecutive tests share one worker while it is idle between them
    (:class:`_SharedWorker`); otherwise it is stopped (SIGTERM, then SIGKILL) afterwards.
    """
    from django.conf import settings

    env = {
        **os.environ,
        **CREDENTIAL_ENV,
        "DATABASE_URL": database_url_for_subprocess(),
        "MUSE_VAR_DIR": str(settings.VAR_DIR),
        "DJANGO_DEBUG": "true",
        "REDIS_URL": settings.REDIS_URL,
        "CONFIG_REFRESH_INTERVAL_S": "0",
    }
    env_key = tuple(sorted((k, v) for k, v in env.items() if not k.startswith("PYTEST_")))
    worker = _shared_worker
    if worker.proc is None or worker.proc.poll() is not None or worker.env_key != env_key:
        worker.stop()
        _purge_task_queues(unacknowledged=True)
        worker.start(env)
        worker.env_key = env_key
    else:
        _purge_task_queues()
    yield worker.proc
    upcoming = _next_item[0]
    keep = (
        upcoming is not None
        and WORKER_FIXTURE in getattr(upcoming, "fixturenames", ())
        and worker.proc.poll() is None
        and worker.idle()
    )
    if not keep:
        worker.stop()


def _purge_task_queues(*, unacknowledged: bool = False) -> None:
    """Drop task messages earlier tests published without a worker to run them. Their jobs' rows
    were rolled back, but a waiting caller's message carries its row (routing.jobs.
    completion_job_new), so a worker would run them and keep this test's job waiting behind them.

    ``unacknowledged`` (only while no worker runs): also drop the messages workers that earlier
    tests killed had received and not finished, which kombu would otherwise hand out again."""
    from muse_experiments.celery import app
    from muse_experiments.infra.queues import Queue

    with app.connection_for_write() as conn:
        channel = conn.default_channel
        for queue in (Queue.COMPLETIONS, Queue.ANALYTICS):
            channel.queue_purge(str(queue))
        if unacknowledged:
            channel.client.delete(channel.unacked_key, channel.unacked_index_key)


def wait_for_records_written(timeout_s: float = 30.0) -> None:
    """Wait until a worker's drainer has written every buffered call record to the database.

    The records of a call reach the database after the answer (write-behind,
    ``routing.worker.drainer``); tests that read them after a worker process answered wait here.
    """
    import time

    from routing.worker import drainer

    deadline = time.monotonic() + timeout_s
    while drainer.pending():
        if time.monotonic() > deadline:
            raise AssertionError(f"call records still buffered after {timeout_s:g}s")
        time.sleep(0.05)


def pytest_terminal_summary(terminalreporter):
    """The requests each schemathesis operation sent, per phase, and why Hypothesis stopped
    (recorded by ``tests/test_schemathesis.py``; also from pytest-xdist workers)."""
    rows = [
        value
        for reports in terminalreporter.stats.values()
        for report in reports
        if getattr(report, "when", None) == "teardown"
        for name, value in report.user_properties
        if name == "schemathesis_cases"
    ]
    if not rows:
        return
    terminalreporter.section("schemathesis: requests sent per operation")
    for row in sorted(rows, key=lambda r: r["operation"]):
        phases = ", ".join(f"{k} {v}" for k, v in sorted(row["phases"].items()))
        total = sum(row["phases"].values())
        terminalreporter.write_line(f"{row['operation']:<50} {total:>6}  ({phases}; {row['stopped']})")
    terminalreporter.write_line(f"{'total':<50} {sum(sum(r['phases'].values()) for r in rows):>6}")
