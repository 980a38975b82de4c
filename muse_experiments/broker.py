"""kombu's Redis transport, keeping one Redis client per channel instead of one per command.

kombu 5.7's Redis ``Channel`` builds a new ``redis.Redis`` for every message it publishes and
every acknowledgement (``Channel.conn_or_acquire`` → ``_create_client``), and ``redis.Redis()``
copies its ~200 response callbacks each time: measured with ``bench/bench_stages.py --profile``,
that was 15% of the web process's publish and 6.6% of a worker's CPU at 32 clients. A client is
thread-safe (each command takes a connection from the channel's pool), so one per channel and
pool is enough. Nothing else changes: same URL, pool, options and wire format.

Installed through :class:`AMQP` (``Celery(amqp=...)``), whose connections (and the pooled ones
Celery publishes on) use :class:`Connection`; other transports (the embedded filesystem broker, RabbitMQ, Sentinel) are left as they are.
"""

from __future__ import annotations

from celery.app.amqp import AMQP as CeleryAMQP
from kombu import Connection as KombuConnection
from kombu import connection as kombu_connection
from kombu.transport import redis as kombu_redis


class Channel(kombu_redis.Channel):
    """A Redis channel whose synchronous client is built once per connection pool."""

    _sync_client = None

    def _create_client(self, asynchronous=False):
        if asynchronous:
            return super()._create_client(asynchronous=True)
        client = self._sync_client
        if client is None or client.connection_pool is not self.pool:
            client = self._sync_client = super()._create_client(asynchronous=False)
        return client


class Transport(kombu_redis.Transport):
    """kombu's Redis transport with :class:`Channel`."""

    Channel = Channel


class Connection(KombuConnection):
    """A kombu connection that uses :class:`Transport` where kombu would use its Redis transport,
    and whose pool (Celery's producer pool) hands out connections that do the same."""

    def get_transport_cls(self):
        cls = super().get_transport_cls()
        return Transport if cls is kombu_redis.Transport else cls

    def Pool(self, limit=None, **kwargs):  # noqa: N802 - kombu's name
        return _ConnectionPool(self, limit=limit, **kwargs)


class _PooledConnection(kombu_connection.PooledConnection, Connection):
    """kombu's pooled connection (closed on error) with :class:`Connection`'s transport."""


class _ConnectionPool(kombu_connection.ConnectionPool):
    def new(self):
        return _PooledConnection(self, **dict(self.connection._info(resolve=False)))


class AMQP(CeleryAMQP):
    """Celery's AMQP helper with :class:`Connection` (``Celery(amqp=...)``)."""

    Connection = Connection
    BrokerConnection = Connection
