"""Structured logs: one JSON object per line, each carrying the request id and job id in scope.

* Web: :class:`muse_experiments.infra.observability.ObservabilityMiddleware` takes the caller's
  ``X-Request-Id`` (when it is a safe token) or makes one, binds it for the request, and echoes it
  in the response.
* Celery: the request id travels to the worker in the task message headers
  (``muse_request_id``); while a task runs its id (for completions: the job id) is bound as
  ``job_id`` (signal handlers at the bottom of this module, connected from ``apps.py``).

Every record formatted by :class:`JsonFormatter` (python-json-logger's, configured) carries ``ts``
(ISO 8601 UTC), ``level``, ``logger``, ``msg``, ``request_id``, ``job_id``, ``process``
(``MUSE_PROCESS_NAME``, set by the production supervisor) and ``pid``; ``exc`` holds a formatted
traceback. Nothing else: the extras a library attaches to a record (a request object, headers)
are never written. Lines outside any request or task have ``null`` ids. ``LOG_FORMAT=json|plain``
picks the formatter (settings).
"""

from __future__ import annotations

import logging
import os
import re
import time
import uuid
from contextvars import ContextVar

from pythonjsonlogger.json import JsonFormatter as _LibraryJsonFormatter

request_id_var: ContextVar[str | None] = ContextVar("muse_request_id", default=None)
job_id_var: ContextVar[str | None] = ContextVar("muse_job_id", default=None)

#: A caller-supplied request id is kept only when it looks like a token (no log injection).
_SAFE_ID = re.compile(r"^[A-Za-z0-9._:-]{1,100}$")
#: Task message header carrying the request id from the web process to the worker.
TASK_HEADER = "muse_request_id"


def new_request_id(supplied: str | None = None) -> str:
    """The caller's id when it is a safe token (``[A-Za-z0-9._:-]``, ≤ 100 chars), else a new one."""
    if supplied and _SAFE_ID.match(supplied):
        return supplied
    return uuid.uuid4().hex


_base_factory = logging.getLogRecordFactory()


def _record_with_ids(*args, **kwargs) -> logging.LogRecord:
    """Stamp the ids in scope on each record when it is created (before any handler runs)."""
    record = _base_factory(*args, **kwargs)
    record.request_id = request_id_var.get()
    record.job_id = job_id_var.get()
    return record


if getattr(_base_factory, "__name__", "") != "_record_with_ids":  # once, even if re-imported
    logging.setLogRecordFactory(_record_with_ids)


class JsonFormatter(_LibraryJsonFormatter):
    """One JSON line per record with exactly :data:`FIELDS` (see the module docstring)."""

    FIELDS = ("ts", "level", "logger", "msg", "request_id", "job_id", "process", "pid", "exc")
    converter = time.gmtime
    default_time_format = "%Y-%m-%dT%H:%M:%S"
    default_msec_format = "%s.%03dZ"

    def __init__(self, *args, **kwargs) -> None:
        kwargs.setdefault(
            "fmt", "%(asctime)s %(levelname)s %(name)s %(message)s %(request_id)s %(job_id)s %(process)d"
        )
        kwargs.setdefault(
            "rename_fields",
            {"asctime": "ts", "levelname": "level", "name": "logger", "message": "msg",
             "process": "pid", "exc_info": "exc", "process_name": "process"},
        )  # fmt: skip
        kwargs.setdefault("defaults", {"process_name": os.environ.get("MUSE_PROCESS_NAME", "")})
        kwargs.setdefault("json_default", str)
        kwargs.setdefault("json_ensure_ascii", False)
        super().__init__(*args, **kwargs)

    def process_log_record(self, log_data: dict) -> dict:
        """Only :data:`FIELDS`, in that order: a record's extras are dropped."""
        return {name: log_data[name] for name in self.FIELDS if name in log_data}


class ContextFormatter(logging.Formatter):
    """The plain development format, with the request and job ids appended when bound."""

    def format(self, record: logging.LogRecord) -> str:
        line = super().format(record)
        rid, jid = getattr(record, "request_id", None), getattr(record, "job_id", None)
        if rid or jid:
            line += f" [request_id={rid or '-'} job_id={jid or '-'}]"
        return line


# --- Celery: carry the request id to the worker, bind the job id while a task runs ------------


class NotGatewayStatus(logging.Filter):
    """Drops ``django.request``'s ERROR line for a 502, 503 or 504: answers this platform gives on
    purpose about something behind it (an upstream that failed after every fallback, a kill
    switch, an open circuit, a full concurrency limit, a backing-service outage, a call that ran
    out of time or whose caller left). Each still has its access line (``muse.access``, with the
    status and the request id, which Django's line lacked); the job records why it failed; a
    backing-service outage has its own ERROR line naming the exception
    (:class:`muse_experiments.api.errors.DependencyOutageMiddleware`). A 500 is still logged."""

    GATEWAY = frozenset({502, 503, 504})

    def filter(self, record: logging.LogRecord) -> bool:
        return getattr(record, "status_code", None) not in self.GATEWAY


def inject_request_id(headers: dict | None = None, **_kwargs) -> None:
    """``before_task_publish``: put the current request id into the message headers."""
    rid = request_id_var.get()
    if rid and headers is not None:
        headers.setdefault(TASK_HEADER, rid)


def bind_task_context(task_id: str | None = None, task=None, **_kwargs) -> None:
    """``task_prerun``: bind ``job_id`` (the task id) and the publishing request's id."""
    job_id_var.set(task_id)
    rid = getattr(task.request, TASK_HEADER, None) if task is not None else None
    if rid is None and task is not None:
        rid = (getattr(task.request, "headers", None) or {}).get(TASK_HEADER)
    request_id_var.set(rid)


def clear_task_context(**_kwargs) -> None:
    """``task_postrun``: unbind the ids (worker threads are reused)."""
    job_id_var.set(None)
    request_id_var.set(None)
