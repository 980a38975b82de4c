"""The embedded default's Celery broker and result store: files under ``var/``, written atomically.

Used only when ``REDIS_URL`` is unset, so a laptop runs a web server and separate worker
processes with nothing else installed. Kombu's filesystem transport and Celery's filesystem
result backend write files in place, so a reader polling the folder can pick up a half-written
file (seen as ``JSONDecodeError`` in the worker under load). These subclasses write to a staging
file and ``os.replace`` it into place, which is atomic on POSIX, so readers see all or nothing.
Production uses Redis (``REDIS_URL``) instead.
"""

from __future__ import annotations

import os
import tempfile
import uuid
from time import monotonic

from celery.backends.filesystem import FilesystemBackend
from kombu.transport import filesystem
from kombu.utils.encoding import ensure_bytes, str_to_bytes
from kombu.utils.json import dumps


def _atomic_write(path: str | bytes, data: bytes) -> None:
    """Write ``data`` to a staging file beside ``path``'s folder, then rename it into place."""
    path = os.fsdecode(path)
    directory = os.path.dirname(path)
    fd, staging = tempfile.mkstemp(dir=os.path.join(directory, os.pardir), prefix=".staging-")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(staging, path)
    except BaseException:
        if os.path.exists(staging):
            os.unlink(staging)
        raise


class AtomicChannel(filesystem.Channel):
    def _put(self, queue, payload, **kwargs):
        name = f"{int(round(monotonic() * 1000))}_{uuid.uuid4()}.{queue}.msg"
        _atomic_write(os.path.join(self.data_folder_out, name), str_to_bytes(dumps(payload)))


class AtomicFilesystemTransport(filesystem.Transport):
    """Kombu's filesystem transport with atomic message files."""

    Channel = AtomicChannel


class AtomicFilesystemBackend(FilesystemBackend):
    """Celery's filesystem result backend with atomic result files.

    URL: ``muse_experiments.embedded:AtomicFilesystemBackend:///absolute/path``.
    """

    def _find_path(self, url):
        if url and "://" in url:
            return url.split("://", 1)[1]
        return super()._find_path(url)

    def as_uri(self, include_password=False):
        return f"file://{os.fsdecode(self.path)}"

    def set(self, key, value):
        _atomic_write(self._filename(key), ensure_bytes(value))
