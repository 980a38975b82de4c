"""The Celery broker's measured optimisations, each behind one name (figures in bench/README.md):

* :class:`AMQP` (``Celery(amqp=...)``): kombu's Redis transport with a worker's channel that hands
  a delivered task on before recording it as unacknowledged, and records a completion task only
  once it has run for a while (:class:`QoS`): two ``MULTI`` round trips less of worker CPU per
  task, off the claim's path (``bench/bench_broker_record.py``, ``bench/bench_stages.py``).
* :func:`publish_task`: the web's direct publish of a task message onto a Redis queue
  (:class:`DirectPublisher`): less web CPU per publish (``bench/bench_publish.py``).

:class:`AMQP`'s connections use :class:`Connection`; other transports (RabbitMQ, Sentinel) are left
as they are.
"""

from __future__ import annotations

import base64
import json
import logging
import threading
import uuid
from collections.abc import Callable, Sequence
from typing import Any

from celery import signals
from celery.app.amqp import AMQP as CeleryAMQP
from kombu import Connection as KombuConnection
from kombu.entity import DELIVERY_MODES
from kombu.serialization import dumps as serialize
from kombu.transport import redis as kombu_redis
from kombu.transport import virtual as kombu_virtual
from kombu.utils.functional import retry_over_time

from .redis_client import client_url, redis_client

log = logging.getLogger(__name__)

#: Transport option: ``{queue: seconds}`` — a message delivered from ``queue`` is recorded as
#: unacknowledged only if its task still runs that long after delivery (:class:`QoS`).
RECORD_AFTER_OPTION = "unacked_record_after_s"


class QoS(kombu_redis.QoS):
    """kombu's Redis acknowledgement emulation, except that a delivery from a queue named in the
    transport option :data:`RECORD_AFTER_OPTION` is written to the unacknowledged hash and index
    only if it is still unsettled that many seconds later (a timer on the worker's event loop).

    kombu writes every delivery there (``MULTI``: ``ZADD`` + ``HSET`` of the whole message) and
    removes it at the acknowledgement (``MULTI``: ``ZREM`` + ``HDEL``), so that the message can be
    delivered again (after the visibility timeout, 1 h here) if its worker dies. For a completion
    task the job's own claim already is that record, written by the task a millisecond after it
    starts (a Redis hash with a lease, :mod:`routing.state.claims`; or the job's row): a worker that dies
    mid-call leaves a ``worker_lost`` job and an unclaimed one is published again by
    :func:`routing.worker.tasks.requeue_lost_jobs` and by the request waiting for it. kombu's write came
    first on the event loop the moment the task was handed to its pool thread, so the thread waited
    for the loop's ``MULTI`` before its claim could go out (a longer claim step,
    ``bench/bench_stages.py``), and every task cost two ``MULTI`` of worker CPU. A completion task that ends within the delay
    now costs neither.

    Everything else is kombu's: the in-memory count of unacknowledged messages (prefetch) is taken
    at delivery; a message rejected with ``requeue``, or restored when the channel closes (a warm
    shutdown, a lost connection), goes back to its queue from memory, as kombu restores a recorded
    one; acknowledgement, timers and the record all run on the worker's event loop thread
    (Celery's ``call_soon_ack``). A settled delivery's timer is cancelled. What a worker *killed*
    before the record loses is the message, as kombu loses one killed between its pop and its
    record: the job's claim and ``requeue_lost_jobs`` cover it. That window is the delay, or, for
    a task delivered less than the delay before a warm shutdown, the whole drain of the pool
    (timers do not fire while it drains; the channel's close then restores it from memory). A
    failed write leaves the delivery unrecorded, to be restored from memory at close. Without an
    event loop (a synchronous consumer) nothing is deferred.
    """

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        options = self.channel.connection.client.transport_options or {}
        self._record_after = dict(options.get(RECORD_AFTER_OPTION) or {})
        self._unrecorded: dict[str, object] = {}  # delivery tag -> its timer entry

    def append(self, message, delivery_tag, queue: str | None = None):
        """kombu's ``append``; with ``queue`` (the queue the message was popped from, passed by
        :meth:`Channel.basic_consume`) named in :data:`RECORD_AFTER_OPTION`, the Redis write waits."""
        loop = getattr(self.channel.connection, "muse_event_loop", None)
        delay = self._record_after.get(queue) if queue is not None else None
        if loop is None or not delay:
            return super().append(message, delivery_tag)
        kombu_virtual.QoS.append(self, message, delivery_tag)
        self._unrecorded[delivery_tag] = loop.call_later(delay, self._record, message, delivery_tag)

    def _record(self, message, delivery_tag) -> None:
        """Write a still-unsettled delivery to the unacknowledged hash and index, as kombu does."""
        if delivery_tag not in self._unrecorded or self.channel.closed:
            return
        try:
            super().append(message, delivery_tag)
        except Exception:  # noqa: BLE001 - a timer must not stop the worker's event loop
            log.exception("could not record delivery %s as unacknowledged", delivery_tag)
            return
        self._unrecorded.pop(delivery_tag, None)

    def _settled(self, delivery_tag) -> bool:
        """Forget an unrecorded delivery (cancelling its timer); whether it was one."""
        entry = self._unrecorded.pop(delivery_tag, None)
        if entry is None:
            return False
        entry.cancel()
        return True

    def ack(self, delivery_tag):
        if self._settled(delivery_tag):  # nothing written: nothing to remove
            return kombu_virtual.QoS.ack(self, delivery_tag)
        return super().ack(delivery_tag)

    def reject(self, delivery_tag, requeue=False):
        if delivery_tag not in self._unrecorded:
            return super().reject(delivery_tag, requeue=requeue)
        if requeue:
            self.restore_by_tag(delivery_tag, leftmost=True)  # settles it
        else:
            self._settled(delivery_tag)
        return kombu_virtual.QoS.ack(self, delivery_tag)

    def restore_by_tag(self, tag, client=None, leftmost=False):
        if tag not in self._unrecorded:
            return super().restore_by_tag(tag, client=client, leftmost=leftmost)
        message = self._delivered.get(tag)
        if message is not None:
            delivery = message.delivery_info
            with self.channel.conn_or_acquire(client) as conn:
                pipe = conn.pipeline()
                self.channel._do_restore_message(
                    message._raw, delivery["exchange"], delivery["routing_key"], pipe, leftmost
                )
                pipe.execute()
        self._settled(tag)
        return None


class Channel(kombu_redis.Channel):
    """kombu's Redis channel with :class:`QoS`, handing a delivered message on before recording it."""

    QoS = QoS

    def basic_consume(self, queue, no_ack, callback, consumer_tag, **kwargs):
        """kombu's consumer, except that a delivered message goes to the worker *before* it is
        recorded as unacknowledged, not after.

        kombu records each message it pops (``BRPOP``) in the unacknowledged hash and index
        (``QoS.append``: one ``MULTI``/``EXEC`` round trip) and only then hands it on, so every
        task waited for that round trip before a pool thread could start it. Here the task is
        handed to the pool first and recorded while it starts. Nothing can acknowledge it in
        between: the worker acknowledges on its event loop (``hub.call_soon``), the thread this
        runs on, after this returns; a message the worker settled at once (rejected as
        malformed, say) is not recorded at all. What a worker killed in that moment loses is
        what kombu already loses between the pop and the record: the message, which
        :func:`routing.worker.tasks.requeue_lost_jobs` publishes again for a completion job. A completion
        task's record waits longer still (:class:`QoS`, told the queue the message came from).
        """
        super().basic_consume(queue, no_ack, callback, consumer_tag, **kwargs)
        if no_ack:
            return

        def _callback(raw_message):
            message = self.Message(raw_message, channel=self)
            try:
                return callback(message)
            finally:
                if not message.acknowledged:
                    self.qos.append(message, message.delivery_tag, queue=queue)

        self.connection._callbacks[queue] = _callback


class Transport(kombu_redis.Transport):
    """kombu's Redis transport with :class:`Channel`; keeps the event loop it is registered with
    (a worker's hub: :class:`QoS` schedules its records there)."""

    Channel = Channel
    muse_event_loop = None

    def register_with_event_loop(self, connection, loop):
        self.muse_event_loop = loop
        return super().register_with_event_loop(connection, loop)


class Connection(KombuConnection):
    """A kombu connection that uses :class:`Transport` where kombu would use its Redis transport."""

    def get_transport_cls(self):
        cls = super().get_transport_cls()
        return Transport if cls is kombu_redis.Transport else cls


class AMQP(CeleryAMQP):
    """Celery's AMQP helper with :class:`Connection` (``Celery(amqp=...)``)."""

    Connection = Connection
    BrokerConnection = Connection


# -- direct publish -------------------------------------------------------------------------------


class DirectPublisher:
    """Pushes task messages built by ``app.amqp.as_task_v2`` straight onto a Redis queue's list.

    Each list entry is the one ``app.amqp.send_task_message`` would push through kombu's Redis
    transport for a direct (anonymous-exchange) publish at priority 0: kombu's message dict
    (``body`` serialised with ``task_serializer`` and base64-encoded, as the transport's
    ``body_encoding``; ``headers``; ``properties`` with ``delivery_mode``, ``delivery_info``,
    ``priority`` and a fresh ``delivery_tag``) as JSON, ``LPUSH``ed on the list named after the
    queue, so any Celery worker consumes it as its own (the web's dispatch tests compare it with
    ``apply_async``'s). What it leaves out is kombu's producer machinery: a pooled
    connection and channel taken and returned per message, the queue declaration a direct
    publish on Redis does not need, and several reads of Celery's layered configuration per
    message, which are read once here.

    Built by :func:`direct_publisher`, used by :func:`publish_task`; thread-safe (redis-py takes a pooled connection per
    command).
    """

    def __init__(self, app, client) -> None:
        conf = app.conf
        self.client = client
        self.serializer = conf.task_serializer
        self.retry_policy = dict(conf.task_publish_retry_policy or {})
        mode = conf.task_default_delivery_mode
        self.delivery_mode = DELIVERY_MODES.get(mode, mode)
        self._bounded_push = None  # push_bounded's registered Lua script, made on first use

    def push(self, message, *, name: str, queue: str, send: Callable[[str, str], Any] | None = None) -> None:
        """Publish ``message`` (Celery's ``task_message(headers, properties, body, sent_event)``)
        for task ``name`` on ``queue``. ``send(queue, entry)`` pushes the encoded entry itself
        (default ``LPUSH``), with what must go with it (e.g. one script that writes a record and
        pushes: one command, both or neither); it must accept being retried.

        The ``before_task_publish`` and ``after_task_publish`` signals are sent as Celery sends
        them. Connection errors are retried with ``task_publish_retry_policy`` through kombu's
        ``retry_over_time``, as kombu's ``Producer.publish`` retries; the last
        ``redis.ConnectionError`` / ``redis.TimeoutError`` propagates. A retry after a lost reply
        may push the message twice; the job's claim makes the second delivery a no-op, as with
        kombu.
        """
        import redis

        entry = self._entry(message, name=name, queue=queue)
        self._retrying(send or self.client.lpush, (queue, entry), redis)
        self._published(message, name=name, queue=queue)

    def push_bounded(self, messages: Sequence, *, name: str, queue: str, limit: int) -> int:
        """Publish ``messages`` in order as :meth:`push` does, while the queue's list holds fewer
        than ``limit`` entries: one Lua script (one round trip for them all) reads the list's
        length and pushes each message that fits, and leaves the rest out. Returns how many were
        pushed (the first ones). The bound is the list itself, so nothing can drift from it (a
        purged queue is empty again); messages a worker has already taken do not count."""
        import redis

        if not messages:
            return 0
        entries = [self._entry(m, name=name, queue=queue) for m in messages]
        script = self._bounded_push
        if script is None:
            script = self._bounded_push = self.client.register_script(_BOUNDED_PUSH)
        pushed: list[int] = []

        def send(queue: str, entries: list[str]) -> None:
            pushed.append(int(script(keys=[queue], args=[int(limit), *entries])))

        self._retrying(send, (queue, entries), redis)
        n = pushed[-1] if pushed else 0
        for message in messages[:n]:
            self._published(message, name=name, queue=queue)
        return n

    def _entry(self, message, *, name: str, queue: str) -> str:
        """The list entry of ``message`` (see the class docstring); sends ``before_task_publish``."""
        headers, properties, body, _sent_event = message
        if signals.before_task_publish.receivers:
            signals.before_task_publish.send(
                sender=name, body=body, exchange="", routing_key=queue, declare=[],
                headers=headers, properties=properties, retry_policy=self.retry_policy,
            )  # fmt: skip
        content_type, content_encoding, data = serialize(body, serializer=self.serializer)
        if isinstance(data, str):
            data = data.encode(content_encoding)
        return json.dumps(
            {
                "body": base64.b64encode(data).decode("ascii"),
                "content-encoding": content_encoding,
                "content-type": content_type,
                "headers": headers,
                "properties": {
                    **properties,
                    "delivery_mode": self.delivery_mode,
                    "delivery_info": {"exchange": "", "routing_key": queue},
                    "priority": 0,
                    "body_encoding": "base64",
                    "delivery_tag": str(uuid.uuid4()),
                },
            }
        )

    def _retrying(self, send: Callable[..., None], args: tuple, redis) -> None:
        """``send(*args)``, connection errors retried by ``task_publish_retry_policy``."""
        policy = self.retry_policy
        retry_over_time(
            send, (redis.ConnectionError, redis.TimeoutError), args=args,
            max_retries=policy.get("max_retries", 3), interval_start=policy.get("interval_start", 0),
            interval_step=policy.get("interval_step", 0.2), interval_max=policy.get("interval_max", 1),
        )  # fmt: skip

    def _published(self, message, *, name: str, queue: str) -> None:
        headers, _properties, body, _sent_event = message
        if signals.after_task_publish.receivers:
            signals.after_task_publish.send(
                sender=name, body=body, headers=headers, exchange="", routing_key=queue
            )


#: KEYS[1] the queue's list; ARGV[1] the limit, ARGV[2..] the entries in order.
_BOUNDED_PUSH = """
local room = tonumber(ARGV[1]) - redis.call('LLEN', KEYS[1])
local n = math.max(0, math.min(room, #ARGV - 1))
for i = 2, n + 1 do redis.call('LPUSH', KEYS[1], ARGV[i]) end
return n
"""


_direct_lock = threading.Lock()
_UNSET = object()


def direct_publisher(app) -> DirectPublisher | None:
    """``app``'s :class:`DirectPublisher` (kept on the app), or None where it cannot publish:
    the broker is not a plain ``redis://``/``rediss://`` URL or a Unix socket (``redis+socket://``,
    ``unix://``) (Sentinel, failover lists and other transports), its transport options set ``global_keyprefix``, TLS options are set
    (``broker_use_ssl``: kombu applies them, a client built from the URL would not), or Celery
    sends ``task-sent`` events (their dispatcher needs kombu's producer). Its Redis client is the
    one :func:`~muse_experiments.infra.redis_client.redis_client` keeps for the broker URL, so it reaches
    the server and database kombu would. Decided once per app.
    """
    publisher = getattr(app, "_muse_direct_publisher", _UNSET)
    if publisher is _UNSET:
        with _direct_lock:
            publisher = getattr(app, "_muse_direct_publisher", _UNSET)
            if publisher is _UNSET:
                publisher = app._muse_direct_publisher = _build_direct(app)
    return publisher


def _build_direct(app) -> DirectPublisher | None:
    url = app.conf.broker_url
    if not isinstance(url, str) or app.conf.task_send_sent_event:
        return None
    url = client_url(url)
    if url.split("://", 1)[0] not in ("redis", "rediss", "unix") or ";" in url:
        return None
    if (app.conf.broker_transport_options or {}).get("global_keyprefix") or app.conf.broker_use_ssl:
        return None
    return DirectPublisher(app, redis_client(url))


def publish_task(
    app, message, *, name: str, queue: str, send: Callable[[str, str], Any] | None = None
) -> bool:
    """Publish ``message`` (built by ``app.amqp.as_task_v2``) for task ``name`` on ``queue``.

    What it buys: less web CPU per publish than ``send_task_message`` through kombu's producer
    (``bench/bench_publish.py``). :func:`direct_publisher`'s :class:`DirectPublisher` pushes it
    where it can; other brokers take ``app.amqp.send_task_message`` on a pooled producer (no queue
    declaration on kombu's Redis transport, where a direct publish needs none). ``send(queue,
    entry)`` pushes the encoded entry with what must go with it (one script: both or neither; it
    must accept being retried) where the broker is the client
    :func:`~muse_experiments.infra.redis_client.redis_client` gives; returns whether it did (when
    False the caller writes what would have gone with it itself). Publish errors propagate (after
    ``task_publish_retry_policy``).
    """
    publisher = direct_publisher(app)
    if publisher is not None and send is not None and publisher.client is redis_client():
        publisher.push(message, name=name, queue=queue, send=send)
        return True
    if publisher is not None:
        publisher.push(message, name=name, queue=queue)
        return False
    with app.producer_or_acquire() as producer:
        redis_transport = isinstance(producer.connection.transport, kombu_redis.Transport)
        app.amqp.send_task_message(
            producer, name, message, queue=queue, declare=[] if redis_transport else None
        )
    return False
