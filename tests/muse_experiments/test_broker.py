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
