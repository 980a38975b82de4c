"""The Redis broker transport hands a delivered task on before recording it, and records a
completion task only once it has run for a while (muse_experiments/infra/broker.py). On real
Redis, with kombu's own event loop (``Hub``)."""

from __future__ import annotations

import contextlib
import json
import time

import kombu.transport.redis as kombu_redis
import pytest
import redis
from kombu.asynchronous import Hub

from muse_experiments.infra import broker
from muse_experiments.infra.redis_client import broker_url


@pytest.mark.parametrize("url", ["memory://", "amqp://guest:guest@127.0.0.1:5672//"])
def test_other_transports_are_left_as_kombu_makes_them(url):
    conn = broker.Connection(url)
    assert conn.get_transport_cls() is not broker.Transport
    assert not issubclass(conn.get_transport_cls(), broker.Transport)


KEYS = ("muse-test-consume", "muse-test-other", "muse-test-unacked", "muse-test-unacked-index")


@contextlib.contextmanager
def open_channel(redis_url: str, hub: Hub | None = None, **options):
    """``(connection, channel, client)``: a channel of :class:`broker.Transport` on its own queues
    and unacknowledged-message keys, registered with ``hub`` if given (as a worker's is)."""
    options = {"unacked_key": "muse-test-unacked", "unacked_index_key": "muse-test-unacked-index", **options}
    with broker.Connection(broker_url(redis_url), transport_options=options) as conn:
        if hub is not None:
            conn.register_with_event_loop(hub)
        channel = conn.channel()
        assert isinstance(channel, broker.Channel)
        client = channel.client
        client.delete(*KEYS)
        try:
            yield conn, channel, client
        finally:
            client.delete(*KEYS)


@pytest.fixture
def consuming(redis_url):
    """A synchronous consumer's channel (no event loop)."""
    with open_channel(redis_url) as opened:
        yield opened


def deliver(conn, channel, on_message) -> list:
    """Publish one message on ``muse-test-consume`` and deliver it to ``on_message``."""
    delivered: list = []

    def callback(message):
        delivered.append(message)
        on_message(message)

    channel.basic_consume("muse-test-consume", False, callback, "muse-test")
    channel.basic_publish(channel.prepare_message('{"n": 1}'), "", "muse-test-consume")
    conn.drain_events(timeout=5)
    return delivered


def test_a_delivered_message_reaches_the_worker_before_it_is_recorded_unacknowledged(consuming):
    conn, channel, client = consuming
    seen_unacked: list[int] = []
    [message] = deliver(conn, channel, lambda m: seen_unacked.append(client.hlen("muse-test-unacked")))
    assert seen_unacked == [0]  # handed on first: kombu alone records it before the callback
    tag = message.delivery_tag
    assert client.hexists("muse-test-unacked", tag) and client.zscore("muse-test-unacked-index", tag)
    assert tag in channel.qos._delivered
    message.ack()  # then acknowledged as kombu acknowledges: both records go
    assert client.hlen("muse-test-unacked") == 0 and client.zcard("muse-test-unacked-index") == 0


def test_a_message_settled_during_delivery_is_not_recorded_unacknowledged(consuming):
    conn, channel, client = consuming
    [message] = deliver(conn, channel, lambda m: m.reject())
    assert message.acknowledged
    assert client.hlen("muse-test-unacked") == 0 and client.zcard("muse-test-unacked-index") == 0
    assert client.llen("muse-test-consume") == 0  # rejected without requeue: gone, not redelivered


LATER_S = 0.2


@pytest.fixture
def consuming_later(redis_url, caplog):
    """As :func:`consuming`, on a worker's event loop (kombu's ``Hub``), recording
    ``muse-test-consume`` deliveries only after :data:`LATER_S`; no record may fail."""
    hub = Hub()
    try:
        options = {broker.RECORD_AFTER_OPTION: {"muse-test-consume": LATER_S}}
        with open_channel(redis_url, hub, **options) as (conn, channel, client):
            yield conn, channel, client, hub
    finally:
        hub.close()
    assert "could not record" not in caplog.text


def recorded(client) -> tuple[int, int]:
    return client.hlen("muse-test-unacked"), client.zcard("muse-test-unacked-index")


def after_the_delay(hub) -> None:
    time.sleep(LATER_S + 0.05)
    hub.fire_timers()


def test_a_task_settled_within_the_delay_is_never_written_as_unacknowledged(consuming_later):
    conn, channel, client, hub = consuming_later
    channel.basic_qos(0, 1, False)  # prefetch 1
    [message] = deliver(conn, channel, lambda m: None)
    assert recorded(client) == (0, 0)
    assert not channel.qos.can_consume()  # counted against the prefetch limit at once
    message.ack()
    assert channel.qos.can_consume()
    [timer] = [s.entry for s in hub.timer.queue if getattr(s.entry.fun, "__name__", "") == "_record"]
    assert timer.canceled  # skipped without counting against the hub's timers per tick
    after_the_delay(hub)
    assert recorded(client) == (0, 0)


def test_a_task_still_running_after_the_delay_is_recorded_as_kombu_records_it(consuming_later):
    conn, channel, client, hub = consuming_later
    [message] = deliver(conn, channel, lambda m: None)
    after_the_delay(hub)
    tag = message.delivery_tag
    assert recorded(client) == (1, 1)
    entry, exchange, routing_key = json.loads(client.hget("muse-test-unacked", tag))
    assert (entry["body"], exchange, routing_key) == (message._raw["body"], "", "muse-test-consume")
    message.ack()
    assert recorded(client) == (0, 0)


def test_an_unrecorded_task_goes_back_to_its_queue_when_requeued_or_its_channel_closes(consuming_later):
    conn, channel, client, hub = consuming_later
    [message] = deliver(conn, channel, lambda m: None)
    message.requeue()
    assert client.llen("muse-test-consume") == 1
    assert json.loads(client.lindex("muse-test-consume", 0))["headers"]["redelivered"] is True
    conn.drain_events(timeout=5)  # delivered again, then its channel closes (a warm shutdown)
    assert client.llen("muse-test-consume") == 0
    channel.close()
    assert client.llen("muse-test-consume") == 1
    after_the_delay(hub)  # neither delivery is recorded afterwards
    assert recorded(client) == (0, 0)


def test_a_failed_record_leaves_the_delivery_to_be_restored_at_close(consuming_later, monkeypatch, caplog):
    conn, channel, client, hub = consuming_later
    deliver(conn, channel, lambda m: None)

    def refused(*args, **kwargs):
        raise redis.ConnectionError("Redis went away")

    with monkeypatch.context() as m:
        m.setattr(kombu_redis.QoS, "append", refused)
        after_the_delay(hub)
    assert "could not record" in caplog.text
    caplog.clear()
    assert recorded(client) == (0, 0)
    channel.close()  # still restored from memory: not lost
    assert client.llen("muse-test-consume") == 1


def test_other_queues_are_recorded_at_delivery_as_kombu_records_them(consuming_later):
    conn, channel, client, hub = consuming_later
    channel.basic_consume("muse-test-other", False, lambda m: None, "muse-test-other")
    channel.basic_publish(channel.prepare_message('{"n": 2}'), "", "muse-test-other")
    conn.drain_events(timeout=5)
    assert recorded(client) == (1, 1)


def test_each_test_process_takes_a_redis_database_of_its_own():
    """Under pytest-xdist one ``redis://`` URL becomes one database per process, counting down from
    the given one; a socket URL (a private server per process already) is kept."""
    from muse_experiments.infra.redis_client import xdist_worker_url

    assert xdist_worker_url("redis://127.0.0.1:6379/15", "gw0") == "redis://127.0.0.1:6379/15"
    assert xdist_worker_url("redis://127.0.0.1:6379/15", "gw1") == "redis://127.0.0.1:6379/14"
    assert xdist_worker_url("redis://:pw@h:6380/0", "gw1") == "redis://:pw@h:6380/15"
    assert xdist_worker_url("redis://127.0.0.1:6379", "gw2") == "redis://127.0.0.1:6379/14"
    assert xdist_worker_url("redis://127.0.0.1:6379/15", "") == "redis://127.0.0.1:6379/15"
    assert xdist_worker_url("unix:///tmp/r.sock?db=0", "gw1") == "unix:///tmp/r.sock?db=0"


def test_publish_task_sends_directly_or_through_kombus_producer(redis_url):
    """:func:`broker.publish_task`: the direct publish where it can (through ``send``, with what
    goes along, when the broker is :func:`redis_client`'s), else kombu's producer (here because
    ``task-sent`` events need it); either way a worker reads the same message."""
    from celery import Celery

    from muse_experiments.infra.redis_client import client_url, redis_client

    url = broker_url(redis_url)
    client = redis_client(client_url(url))
    assert client is redis_client()
    client.delete("muse-test-publish", "muse-test-along")

    def send(queue: str, entry: str) -> None:
        pipe = client.pipeline(transaction=True)
        pipe.set("muse-test-along", "1")
        pipe.lpush(queue, entry)
        pipe.execute()

    try:
        for sent_event, direct in ((False, True), (True, False)):
            app = Celery("muse-test-publish", broker=url, set_as_current=False, amqp=broker.AMQP)
            app.conf.task_send_sent_event = sent_event
            message = app.amqp.as_task_v2("job-1", "routing.run_completion", args=["job-1"], kwargs={})
            went_along = broker.publish_task(
                app, message, name="routing.run_completion", queue="muse-test-publish", send=send
            )
            assert went_along is direct  # the test's broker is redis_client()'s server and database
            [raw] = client.lrange("muse-test-publish", 0, -1)
            entry = json.loads(raw)
            assert entry["headers"]["id"] == "job-1" and entry["headers"]["task"] == "routing.run_completion"
            assert entry["properties"]["delivery_info"]["routing_key"] == "muse-test-publish"
            assert bool(client.exists("muse-test-along")) is went_along
            client.delete("muse-test-publish", "muse-test-along")
            app.close()
    finally:
        client.delete("muse-test-publish", "muse-test-along")
