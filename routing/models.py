"""Routing data: the model catalogue, completion jobs and the record of every upstream call.

The catalogue never stores a credential: a :class:`Provider` names the environment variable (or
``<NAME>_FILE`` secret file) that holds it, and :mod:`routing.guards.credentials` resolves it at call time.
"""

from __future__ import annotations

import uuid

from django.core.exceptions import ValidationError
from django.core.validators import MinValueValidator, RegexValidator
from django.db import models
from django.utils import timezone


class ProviderKind(models.TextChoices):
    NATIVE = "native", "Native (Avocado inference service)"
    AZURE_OPENAI = "azure_openai", "Azure OpenAI"
    OPENAI = "openai", "OpenAI"
    ANTHROPIC = "anthropic", "Anthropic"


class ApiStyle(models.TextChoices):
    CHAT_COMPLETIONS = "chat_completions", "Chat Completions"
    RESPONSES = "responses", "Responses"
    MESSAGES = "messages", "Anthropic Messages"


env_var_name = RegexValidator(
    r"^[A-Z_][A-Z0-9_]*$", "Use an environment variable name such as AZURE_OPENAI_API_KEY."
)


class Provider(models.Model):
    """An upstream service and where its credential lives (the variable's *name*, never its value)."""

    key = models.SlugField(max_length=64, unique=True)
    kind = models.CharField(max_length=20, choices=ProviderKind.choices)
    base_url = models.URLField(max_length=500, help_text="e.g. https://my-resource.openai.azure.com")
    credential_env = models.CharField(
        max_length=100,
        validators=[env_var_name],
        help_text="Name of the environment variable holding the API key; NAME_FILE is read if set.",
    )
    api_version = models.CharField(
        max_length=40,
        blank=True,
        help_text="Azure only: dated api-version; blank uses the /openai/v1/ base URL.",
    )
    enabled = models.BooleanField(default=True)

    #: The fields that say where the credential goes: changing them (or adding a provider) needs
    #: ``routing.change_provider_endpoint``, and their values must be in the credential binding
    #: (:mod:`routing.guards.credentials`).
    ENDPOINT_FIELDS = ("base_url", "credential_env")

    class Meta:
        permissions = [
            ("change_provider_endpoint", "Can change a provider's base URL or credential variable")
        ]

    def __str__(self) -> str:
        return f"{self.key} ({self.get_kind_display()})"

    @property
    def is_external(self) -> bool:
        return self.kind != ProviderKind.NATIVE


class ModelEndpoint(models.Model):
    """A model a call can be routed to, by its public id (``avocado/<32 hex>``, ``azure/muse-special``)."""

    public_id = models.CharField(
        max_length=200,
        unique=True,
        validators=[
            RegexValidator(
                r"^[a-z0-9][a-z0-9._-]*/[A-Za-z0-9._-]+$", "Use provider/model, e.g. azure/muse-special."
            )
        ],
    )
    version_label = models.CharField(max_length=64, blank=True)
    provider = models.ForeignKey(Provider, on_delete=models.PROTECT, related_name="endpoints")
    upstream_model = models.CharField(
        max_length=200, help_text="Upstream model or Azure deployment name, verbatim."
    )
    api_style = models.CharField(max_length=20, choices=ApiStyle.choices)
    supports_tools = models.BooleanField(default=True)
    supports_reasoning = models.BooleanField(default=False)
    supports_streaming = models.BooleanField(default=True)
    supports_structured_output = models.BooleanField(
        default=False,
        help_text="Honours a JSON Schema for its answer (OpenAI response_format / text.format "
        "json_schema, Anthropic output_config.format). Off: such calls are never sent here.",
    )
    supports_json_mode = models.BooleanField(
        default=False,
        help_text="Honours JSON mode (OpenAI response_format json_object). Anthropic Messages has none.",
    )
    price_input_per_mtok = models.DecimalField(
        max_digits=10, decimal_places=4, default=0, validators=[MinValueValidator(0)]
    )
    price_cached_input_per_mtok = models.DecimalField(
        max_digits=10, decimal_places=4, default=0, validators=[MinValueValidator(0)]
    )
    price_cache_write_per_mtok = models.DecimalField(
        "price cache write (5 min) per mtok",
        max_digits=10,
        decimal_places=4,
        default=0,
        validators=[MinValueValidator(0)],
        help_text="Prompt-cache writes with the default 5-minute TTL (Anthropic: 1.25x input).",
    )
    price_cache_write_1h_per_mtok = models.DecimalField(
        "price cache write (1 h) per mtok",
        max_digits=10,
        decimal_places=4,
        default=0,
        validators=[MinValueValidator(0)],
        help_text='Prompt-cache writes with a 1-hour TTL (Anthropic "ttl": "1h": 2x input).',
    )
    price_output_per_mtok = models.DecimalField(
        max_digits=10, decimal_places=4, default=0, validators=[MinValueValidator(0)]
    )
    timeout_s = models.FloatField(
        default=60.0,
        validators=[MinValueValidator(0.1)],
        help_text="Per-attempt request timeout in seconds (passed to the SDK).",
    )
    max_concurrency = models.PositiveIntegerField(
        default=64,
        validators=[MinValueValidator(1)],
        help_text="Most calls in flight to this endpoint across all processes; over it, calls fall back.",
    )
    enabled = models.BooleanField(
        default=True, help_text="Off: never called (calls fall back, reason 'endpoint_killed')."
    )
    is_platform_default = models.BooleanField(
        default=False, help_text="Serves units outside every experiment."
    )

    class Meta:
        ordering = ["public_id"]
        constraints = [
            models.UniqueConstraint(
                fields=["is_platform_default"],
                condition=models.Q(is_platform_default=True),
                name="one_platform_default_endpoint",
            )
        ]

    def __str__(self) -> str:
        return f"{self.public_id} [{self.version_label}]" if self.version_label else self.public_id

    def clean(self) -> None:
        if self.supports_json_mode and self.api_style == ApiStyle.MESSAGES:
            raise ValidationError(
                {"supports_json_mode": "Anthropic Messages has no JSON mode (only JSON Schema outputs)."}
            )


class JobStatus(models.TextChoices):
    QUEUED = "queued"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    #: The caller went away (closed the stream or gave up waiting): the upstream call was closed,
    #: the tokens it had cost are recorded on the call (error kind ``client_disconnected``).
    CANCELLED = "cancelled"


#: Statuses a job never leaves.
FINISHED_STATUSES = frozenset({JobStatus.SUCCEEDED, JobStatus.FAILED, JobStatus.CANCELLED})
#: Error of a job whose row vanished after its task was queued (see routing.pipeline.streaming.job_lost).
JOB_LOST = "job_lost: the job's record was lost (database crash); it was not run"


class CompletionJob(models.Model):
    """One routed completion asked for through the API; the worker fills in the result."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    idempotency_key = models.CharField(max_length=200, blank=True)
    api_key = models.ForeignKey("muse_experiments.ApiKey", null=True, on_delete=models.SET_NULL)
    session_id = models.CharField(max_length=200, db_index=True)
    user_id = models.CharField(max_length=200, db_index=True)
    subagent = models.CharField(max_length=200, blank=True)
    attributes = models.JSONField(default=dict)
    request = models.JSONField(help_text="Normalised request: messages, tools.")
    status = models.CharField(max_length=12, choices=JobStatus.choices, default=JobStatus.QUEUED)
    result = models.JSONField(
        null=True, blank=True, help_text="Public result; never holds encrypted reasoning."
    )
    error = models.TextField(blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    # Streaming and delivery bookkeeping (see routing.jobs.completion_job_claim and routing.worker.tasks).
    stream = models.BooleanField(default=False, help_text="Deltas are published to the job's Redis stream.")
    cancel_requested = models.BooleanField(
        default=False,
        help_text="The caller went away; the runner stops the call (without Redis; with Redis a key).",
    )
    deliveries = models.PositiveIntegerField(
        default=0, help_text="How many times a worker picked the task up (redeliveries count)."
    )
    lease_expires_at = models.DateTimeField(
        null=True,
        blank=True,
        help_text="A running job whose lease has expired belongs to a dead worker; it is failed, never re-run.",
    )
    worker = models.CharField(max_length=200, blank=True, help_text="Worker holding the lease.")

    class Meta:
        indexes = [models.Index(fields=["status", "lease_expires_at"], name="job_status_lease")]
        permissions = [
            (
                "request_completion",
                "Can call completions, read their jobs and end sessions with a login session",
            )
        ]
        constraints = [
            models.UniqueConstraint(
                fields=["api_key", "idempotency_key"],
                condition=~models.Q(idempotency_key=""),
                name="unique_idempotency_key_per_api_key",
            )
        ]

    def __str__(self) -> str:
        return f"job {self.id} ({self.status})"


class RoutingReason(models.TextChoices):
    """Why a call was served where it was (``CallRecord.reason``).

    The kill reasons name the switch that moved the call (see :mod:`routing.guards.killswitch`):
    ``experiment_killed`` / ``variant_killed`` (the unit's experiment or variant is killed: served
    by the control, no new enrolment), ``endpoint_killed`` (the endpoint's switch, or the endpoint
    is disabled), ``provider_killed``, ``external_killed`` (all external providers off, also when
    failing closed or forced by ``MUSE_KILL_EXTERNAL``). ``cooling``: the endpoint asked to be left
    alone (``retry-after``) for longer than the retry policy waits. ``killed`` is the generic
    value of rows written before the split (migration 0005 maps what it can; it is never written).
    """

    ASSIGNED = "assigned"
    FORCED = "forced"
    STICKY = "sticky"
    HOLDOUT = "holdout"
    DEFAULT = "default"
    EXPERIMENT_KILLED = "experiment_killed"
    VARIANT_KILLED = "variant_killed"
    ENDPOINT_KILLED = "endpoint_killed"
    PROVIDER_KILLED = "provider_killed"
    EXTERNAL_KILLED = "external_killed"
    KILLED = "killed", "Killed (before the kill reasons were split)"
    CIRCUIT_OPEN = "circuit_open"
    COOLING = "cooling"
    ERROR_FALLBACK = "error_fallback"
    #: The endpoint cannot honour the caller's output contract (a JSON Schema, JSON mode, a forced
    #: tool call): it was never asked (:meth:`routing.providers.types.CompletionRequest.needs`).
    UNSUPPORTED_CONTRACT = "unsupported_contract"


#: Every reason that says the call left its first candidate because of that endpoint's state (not
#: a kill switch): errors, a protected endpoint, cooling, an output contract it cannot honour.
FALLBACK_REASONS = frozenset(
    {
        RoutingReason.ERROR_FALLBACK,
        RoutingReason.CIRCUIT_OPEN,
        RoutingReason.COOLING,
        RoutingReason.UNSUPPORTED_CONTRACT,
    }
)

#: Every reason that says a kill switch moved the call (the legacy generic value included).
KILL_REASONS = frozenset(
    {
        RoutingReason.EXPERIMENT_KILLED,
        RoutingReason.VARIANT_KILLED,
        RoutingReason.ENDPOINT_KILLED,
        RoutingReason.PROVIDER_KILLED,
        RoutingReason.EXTERNAL_KILLED,
        RoutingReason.KILLED,
    }
)
#: Reasons that mean a later candidate served instead of the assigned one.
FALLBACK_REASONS = KILL_REASONS | {
    RoutingReason.CIRCUIT_OPEN,
    RoutingReason.COOLING,
    RoutingReason.ERROR_FALLBACK,
    RoutingReason.UNSUPPORTED_CONTRACT,
}


class CallRecord(models.Model):
    """What routing decided for one completion and what served it: the analytics fact table."""

    job = models.OneToOneField(CompletionJob, on_delete=models.CASCADE, related_name="call")
    session_id = models.CharField(max_length=200)
    user_id = models.CharField(max_length=200)
    subagent = models.CharField(max_length=200, blank=True)
    experiment_id = models.BigIntegerField(null=True, blank=True)
    experiment_key = models.CharField(max_length=100, blank=True)
    phase = models.PositiveIntegerField(null=True, blank=True)
    variant_key = models.CharField(max_length=100, blank=True)
    unit_id = models.CharField(max_length=200, blank=True)
    assigned_endpoint = models.CharField(max_length=200, blank=True)
    served_endpoint = models.CharField(max_length=200, blank=True)
    reason = models.CharField(max_length=20, choices=RoutingReason.choices)
    status = models.CharField(max_length=12, choices=JobStatus.choices)
    error_kind = models.CharField(max_length=60, blank=True)
    latency_ms = models.FloatField(null=True, blank=True)
    ttft_ms = models.FloatField(
        null=True,
        blank=True,
        help_text="Streamed calls: ms from the start of the serving attempt's provider call to its "
        "first content delta (succeeded calls only); empty for calls that were not streamed.",
    )
    input_tokens = models.PositiveIntegerField(default=0)
    cached_input_tokens = models.PositiveIntegerField(default=0)
    cache_write_tokens = models.PositiveIntegerField(default=0)
    output_tokens = models.PositiveIntegerField(default=0)
    reasoning_tokens = models.PositiveIntegerField(default=0)
    cost_usd = models.DecimalField(max_digits=14, decimal_places=8, default=0)
    cost_unknown = models.BooleanField(
        default=False,
        help_text="An attempt died with its worker (outcome 'lost'): it may have been billed; "
        "cost_usd leaves it out.",
    )
    tool_calls = models.PositiveIntegerField(default=0)
    created_at = models.DateTimeField(
        default=timezone.now,
        db_index=True,
        help_text="When the call finished (not when the record was written).",
    )

    class Meta:
        indexes = [models.Index(fields=["experiment_id", "phase", "unit_id"])]

    def __str__(self) -> str:
        return f"call {self.pk} {self.served_endpoint or '-'} ({self.reason})"


class Attempt(models.Model):
    """One try against one endpoint, so retries and fallbacks are counted."""

    call = models.ForeignKey(CallRecord, on_delete=models.CASCADE, related_name="attempts")
    number = models.PositiveSmallIntegerField()
    endpoint = models.CharField(max_length=200)
    outcome = models.CharField(max_length=60, help_text="ok, or the error kind")
    status_code = models.PositiveSmallIntegerField(null=True, blank=True)
    latency_ms = models.FloatField()
    upstream_request_id = models.CharField(max_length=200, blank=True)
    backoff_ms = models.FloatField(
        default=0, help_text="Wait before this attempt (backoff or capped retry-after), ms."
    )
    retry_after_s = models.FloatField(
        null=True, blank=True, help_text="retry-after the upstream sent with this failure, s."
    )
    input_tokens = models.PositiveIntegerField(
        default=0, help_text="Tokens this attempt was billed for, failed attempts included."
    )
    cached_input_tokens = models.PositiveIntegerField(default=0)
    cache_write_tokens = models.PositiveIntegerField(default=0)
    output_tokens = models.PositiveIntegerField(default=0)
    reasoning_tokens = models.PositiveIntegerField(default=0)
    cost_usd = models.DecimalField(
        max_digits=14, decimal_places=8, default=0, help_text="What this attempt cost, USD."
    )
    cost_unknown = models.BooleanField(
        default=False,
        help_text="Died with its worker (outcome 'lost'): it may have been billed, for an unknown "
        "cost (cost_usd is 0).",
    )

    class Meta:
        ordering = ["number"]

    def __str__(self) -> str:
        return f"#{self.number} {self.endpoint}: {self.outcome}"


class KillScope(models.TextChoices):
    ALL_EXTERNAL = "all_external", "All external providers"
    PROVIDER = "provider", "One provider (target: provider key)"
    ENDPOINT = "endpoint", "One model endpoint (target: public id)"
    EXPERIMENT = "experiment", "One experiment (target: experiment key; traffic goes to control)"
    VARIANT = "variant", "One variant (target: <experiment key>/<variant key>; units go to control)"


#: Short names of the kill scopes for lists and titles (the choices' labels explain the target).
KILL_SCOPE_NAMES = {
    KillScope.ALL_EXTERNAL: "all external providers",
    KillScope.PROVIDER: "provider",
    KillScope.ENDPOINT: "model",
    KillScope.EXPERIMENT: "experiment",
    KillScope.VARIANT: "variant",
}


class KillSwitch(models.Model):
    """An operator's off switch. Written only through :func:`routing.jobs.kill_switch_set`
    (audited, bumps the configuration version); read through :func:`routing.guards.killswitch.kill_state`.

    ``target`` is empty for ``all_external``; otherwise a provider key, an endpoint public id, an
    experiment key, or ``<experiment key>/<variant key>``. One row per (scope, target): toggling
    flips ``active`` and keeps the last reason and who/when; ``active_since`` is when it last went
    on (kept while it stays on, cleared when it goes off).
    """

    scope = models.CharField(max_length=20, choices=KillScope.choices)
    target = models.CharField(max_length=300, blank=True)
    active = models.BooleanField(default=True)
    active_since = models.DateTimeField(
        null=True, blank=True, help_text="When the switch last went on (empty while it is off)."
    )
    reason = models.CharField(max_length=500)
    updated_by = models.CharField(max_length=200)
    updated_at = models.DateTimeField(auto_now=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["scope", "target"]
        verbose_name_plural = "kill switches"
        constraints = [models.UniqueConstraint(fields=["scope", "target"], name="one_kill_switch_per_target")]

    def __str__(self) -> str:
        state = "ON" if self.active else "off"
        target = self.target_name
        return (
            f"kill {KILL_SCOPE_NAMES.get(self.scope, self.scope)}{' ' + target if target else ''} [{state}]"
        )

    @property
    def target_name(self) -> str:
        """The target as people name it: a model by its version label (``avocado-v15``; one query,
        or none when the admin list annotated ``target_label``), anything else as stored."""
        if self.scope != KillScope.ENDPOINT or not self.target:
            return self.target
        label = getattr(self, "target_label", None)
        if label is None:
            label = (
                ModelEndpoint.objects.filter(public_id=self.target)
                .values_list("version_label", flat=True)
                .first()
            )
        return label or self.target
