"""The floor of the hot path's architecture: what the stack alone costs, with no product in it.

Issue 10 keeps one shape for every routed completion: the web process hands the call to a Celery
worker over Redis, the worker calls the provider with its official SDK, and the answer comes back
over Redis to the waiting request. This module is that shape and nothing else — a Django view
without middleware, authentication, validation, experiments, guards or records, and a Celery task
that makes the SDK call and pushes the upstream's body back — so ``bench/bench_proxy.py --floor``
can measure it beside LiteLLM's proxy in one run. Whatever the platform adds on top of this floor
is the product's own cost; what the floor costs no change to the platform's code can remove.

It is a Django settings module, URLconf, WSGI application and Celery application in one file
(``DJANGO_SETTINGS_MODULE=floor_app``, ``PYTHONPATH=bench``), configured by ``REDIS_URL``,
``FLOOR_UPSTREAM`` (the upstream's base URL) and ``FLOOR_UPSTREAM_KEY``:

    gunicorn floor_app:application -k gthread --workers 2 --threads 48
    celery -A floor_app worker -l info --pool threads --concurrency 32 -Q floor --without-gossip --without-mingle --without-heartbeat
"""

from __future__ import annotations

import json
import os
import threading
import uuid

# -- Django settings (this module is DJANGO_SETTINGS_MODULE) ------------------------------------
SECRET_KEY = "floor-bench-only"
DEBUG = False
ALLOWED_HOSTS = ["127.0.0.1", "localhost"]
ROOT_URLCONF = __name__
INSTALLED_APPS: list[str] = []
MIDDLEWARE: list[str] = []
DATABASES: dict = {}
USE_TZ = True

REDIS_URL = os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0")
QUEUE = "floor"
#: How long (s) a request waits for its answer.
WAIT_S = 30

os.environ.setdefault("DJANGO_SETTINGS_MODULE", __name__)

import django  # noqa: E402

django.setup()

import openai  # noqa: E402
import redis  # noqa: E402
from celery import Celery  # noqa: E402
from django.core.wsgi import get_wsgi_application  # noqa: E402
from django.http import HttpResponse, JsonResponse  # noqa: E402
from django.urls import path  # noqa: E402
from django.views.decorators.csrf import csrf_exempt  # noqa: E402

# -- Celery: the same broker, serializer and delivery settings as the platform's completions -------
app = Celery("floor", broker=REDIS_URL)
app.conf.update(
    task_serializer="json",
    accept_content=["json"],
    task_ignore_result=True,
    task_acks_late=True,
    worker_prefetch_multiplier=1,
    broker_connection_retry_on_startup=True,
    worker_hijack_root_logger=False,
)
_redis = redis.Redis.from_url(REDIS_URL)
_local = threading.local()


def _sdk() -> openai.OpenAI:
    """One warm SDK client per worker thread (as the platform keeps one per endpoint)."""
    client = getattr(_local, "client", None)
    if client is None:
        client = _local.client = openai.OpenAI(
            base_url=f"{os.environ['FLOOR_UPSTREAM']}/v1",
            api_key=os.environ.get("FLOOR_UPSTREAM_KEY", "sk-floor"),
            max_retries=0,
        )
    return client


@app.task(name="floor.complete", acks_late=True, ignore_result=True)
def complete(reply_key: str, body: dict) -> None:
    """Call the upstream with the SDK and push its answer (JSON text) onto ``reply_key``."""
    answer = _sdk().chat.completions.create(model=body["model"], messages=body["messages"])
    pipe = _redis.pipeline(transaction=True)
    pipe.rpush(reply_key, answer.model_dump_json())
    pipe.expire(reply_key, 60)
    pipe.execute()


# -- The web side: one view ----------------------------------------------------------------------
@csrf_exempt
def chat_completions(request) -> HttpResponse:
    """``POST /v1/chat/completions``: hand the call to a worker, wait for its answer, return it."""
    body = json.loads(request.body)
    reply_key = f"floor:reply:{uuid.uuid4().hex}"
    complete.apply_async(args=[reply_key, body], queue=QUEUE)
    popped = _redis.blpop([reply_key], timeout=WAIT_S)
    if popped is None:
        return JsonResponse({"error": {"message": "timed out"}}, status=504)
    return HttpResponse(popped[1], content_type="application/json")


def health(request) -> HttpResponse:
    return HttpResponse("ok")


urlpatterns = [path("v1/chat/completions", chat_completions), path("healthz", health)]
application = get_wsgi_application()
