"""OpenAPI schema generation settings (kept apart from :mod:`.base`: drf-spectacular imports DRF views,
which import the parser classes named in settings)."""

from __future__ import annotations

from drf_spectacular.openapi import AutoSchema


class MuseAutoSchema(AutoSchema):
    """drf-spectacular schema whose component names stay unique with nested serializers.

    Views declare ``InputSerializer``/``OutputSerializer`` inside themselves; by default every one
    becomes the component ``Input``/``Output`` and they overwrite each other. Nested serializers are
    named after their view instead: ``CompletionCreateApi.InputSerializer`` → ``CompletionCreateInput``.
    """

    def get_serializer_name(self, serializer, direction):
        name = super().get_serializer_name(serializer, direction)
        cls = serializer if isinstance(serializer, type) else type(serializer)
        parts = cls.__qualname__.split(".")
        if len(parts) >= 2 and name == parts[-1]:
            return parts[-2].removesuffix("Api") + name
        return name

    def get_operation_id(self) -> str:
        """A readable operation id from :data:`OPERATIONS` (``createCompletion``), else drf-spectacular's
        path-derived one (``v1_completions_create``)."""
        named = OPERATIONS.get((self.method.upper(), self.path))
        return named[0] if named else super().get_operation_id()

    def get_summary(self) -> str:
        """The one-line title Redoc and Swagger UI show for an operation: from :data:`OPERATIONS`,
        else the operation id in words (``v1_users_x_create`` → ``Users x create``), never the raw id."""
        named = OPERATIONS.get((self.method.upper(), self.path))
        if named:
            return named[1]
        words = super().get_operation_id().removeprefix("v1_").replace("_", " ")
        return words[:1].upper() + words[1:]


#: ``(method, path) → (operation id, summary)`` for the public API (Redoc lists operations by summary).
OPERATIONS: dict[tuple[str, str], tuple[str, str]] = {
    ("POST", "/api/v1/completions"): ("createCompletion", "Create a routed completion"),
    ("GET", "/api/v1/completions/{job_id}"): ("getCompletion", "Get a completion job"),
    ("POST", "/api/v1/events"): ("recordEvents", "Record outcome events"),
    ("GET", "/api/v1/experiments"): ("listExperiments", "List experiments"),
    ("POST", "/api/v1/experiments"): ("createExperiment", "Create an experiment (A/B or bandit)"),
    ("GET", "/api/v1/experiments/{key}"): ("getExperiment", "Get an experiment"),
    ("PATCH", "/api/v1/experiments/{key}"): ("editExperiment", "Edit an experiment"),
    ("GET", "/api/v1/experiments/{key}/results"): ("getResults", "Get an experiment's results"),
    ("POST", "/api/v1/experiments/{key}/results/compute"): ("computeResults", "Compute new results"),
    ("POST", "/api/v1/experiments/preview-assignment"): ("previewAssignment", "Preview a unit's assignment"),
    ("GET", "/api/v1/ops/kill-switches"): ("listKillSwitches", "List kill switches"),
    ("POST", "/api/v1/ops/kill-switches"): ("setKillSwitch", "Turn a kill switch on or off"),
    ("POST", "/api/v1/rollouts"): ("createRollout", "Create a progressive rollout"),
    ("GET", "/api/v1/rollouts/{key}"): ("getRollout", "Get a rollout and its ramp"),
    ("POST", "/api/v1/rollouts/{key}/start"): ("startRollout", "Start or resume a rollout"),
    ("POST", "/api/v1/rollouts/{key}/pause"): ("pauseRollout", "Pause a rollout"),
    ("POST", "/api/v1/rollouts/{key}/rollback"): ("rollBackRollout", "Roll a rollout back to 0 %"),
    ("POST", "/api/v1/sessions/{session_id}/end"): ("endSession", "End a session"),
    ("GET", "/api/v1/shadow-tests"): ("listShadowTests", "List shadow tests"),
    ("POST", "/api/v1/shadow-tests"): ("createShadowTest", "Create a shadow test"),
    ("GET", "/api/v1/shadow-tests/{key}"): ("getShadowTest", "Get a shadow test"),
    ("GET", "/api/v1/shadow-tests/{key}/results"): ("getShadowTestResults", "Get a shadow test's results"),
    ("POST", "/api/v1/shadow-tests/{key}/start"): ("startShadowTest", "Start a shadow test"),
    ("POST", "/api/v1/shadow-tests/{key}/stop"): ("stopShadowTest", "Stop a shadow test"),
    ("POST", "/api/v1/training/export"): ("exportTraining", "Export training transcripts"),
    ("POST", "/api/v1/training/ingest"): ("ingestTraining", "Ingest training records"),
    ("GET", "/api/v1/users/{user_id}/training-opt-out"): (
        "getTrainingOptOut",
        "Get a user's training opt-out",
    ),
    ("POST", "/api/v1/users/{user_id}/training-opt-out"): ("optOutOfTraining", "Opt a user out of training"),
    ("DELETE", "/api/v1/users/{user_id}/training-opt-out"): (
        "optBackIntoTraining",
        "Opt a user back into training",
    ),
}
