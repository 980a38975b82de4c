"""The Redis broker transport keeps one client per channel, on the producer pool's connections too
(kombu builds a ``redis.Redis`` per published message otherwise: muse_experiments/broker.py)."""

from __future__ import annotations

import kombu.transport.redis as kombu_redis
import pytest

from muse_experiments import broker
from muse_experiments.celery import app


def test_the_producer_pool_publishes_on_channels_that_reuse_their_client(redis_url, monkeypatch):
    built: list[bool] = []
    create = kombu_redis.Channel._create_client

    def counting(self, asynchronous=False):
        built.append(asynchronous)
        return create(self, asynchronous)

    monkeypatch.setattr(kombu_redis.Channel, "_create_client", counting)
    with app.producer_or_acquire() as producer:
        assert isinstance(producer.channel, broker.Channel)
        for i in range(5):
            producer.publish({"n": i}, routing_key="muse-test-broker", declare=[])
        client = producer.channel.client
        assert client.llen("muse-test-broker") == 5
        client.delete("muse-test-broker")
    assert built.count(False) <= 1  # one synchronous client for five publishes (kombu alone: five)


@pytest.mark.parametrize("url", ["memory://", "amqp://guest:guest@127.0.0.1:5672//"])
def test_other_transports_are_left_as_kombu_makes_them(url):
    conn = broker.Connection(url)
    assert conn.get_transport_cls() is not broker.Transport
    assert not issubclass(conn.get_transport_cls(), broker.Transport)


@pytest.fixture
def consuming(redis_url):
    """A channel of :class:`broker.Transport` on its own queue and unacknowledged-message keys."""
    options = {"unacked_key": "muse-test-unacked", "unacked_index_key": "muse-test-unacked-index"}
    with broker.Connection(redis_url, transport_options=options) as conn:
        channel = conn.channel()
        assert isinstance(channel, broker.Channel)
        client = channel.client
        keys = ("muse-test-consume", *options.values())
        client.delete(*keys)
        yield conn, channel, client
        client.delete(*keys)


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
