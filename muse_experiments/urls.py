from django.contrib import admin
from django.http import HttpResponsePermanentRedirect, JsonResponse
from django.templatetags.static import static
from django.urls import include, path
from django.views.defaults import page_not_found
from drf_spectacular.views import SpectacularAPIView, SpectacularRedocView, SpectacularSwaggerView

from analytics.apis import EventsCreateApi, ResultsApi, ResultsComputeApi
from analytics.views import results_index, results_page, results_recompute, routing_health_page
from muse_experiments.experiments.apis import AssignmentPreviewApi, ExperimentDetailApi, ExperimentListApi
from muse_experiments.experiments.apis_rollouts import (
    RolloutCreateApi,
    RolloutDetailApi,
    RolloutPauseApi,
    RolloutRollbackApi,
    RolloutStartApi,
)
from muse_experiments.infra.health import healthz, readyz
from muse_experiments.infra.metrics import metrics_view
from routing.api.native import CompletionCreateApi, CompletionDetailApi
from routing.api.ops import KillSwitchListApi
from routing.shadow.apis import ShadowTestDetailApi, ShadowTestListApi, ShadowTestStartApi, ShadowTestStopApi
from routing.shadow.results_apis import ShadowTestResultsApi, shadow_results_page
from routing.transcripts.apis import (
    SessionEndApi,
    TrainingExportApi,
    TrainingIngestApi,
    TrainingOptOutApi,
)


def not_found(request, exception=None):
    """404s: JSON in the API's error shape under /api/ and /v1/, Django's page elsewhere."""
    if request.path.startswith(("/api/", "/v1/")):
        return JsonResponse({"error": {"code": "not_found", "message": "No such endpoint."}}, status=404)
    return page_not_found(request, exception)


handler404 = not_found


def favicon(request):
    """``/favicon.ico``: browsers ask for it on pages that name no icon (Swagger UI, JSON, error
    pages); a permanent redirect to the site's SVG icon (resolved per request, so a hashed static
    storage finds its name)."""
    return HttpResponsePermanentRedirect(static("muse_experiments/favicon.svg"))


# The admin's model sidebar takes ~300 px of every page: at 1,400 px it clipped the wider change
# lists (the model endpoints and call records). The breadcrumbs and the index page list the models.
admin.site.enable_nav_sidebar = False


api_v1 = [
    path("completions", CompletionCreateApi.as_view(), name="completion-create"),
    path("completions/<str:job_id>", CompletionDetailApi.as_view(), name="completion-detail"),
    path("sessions/<str:session_id>/end", SessionEndApi.as_view(), name="session-end"),
    path("users/<str:user_id>/training-opt-out", TrainingOptOutApi.as_view(), name="training-opt-out"),
    path("training/export", TrainingExportApi.as_view(), name="training-export"),
    path("training/ingest", TrainingIngestApi.as_view(), name="training-ingest"),
    path("events", EventsCreateApi.as_view(), name="events-create"),
    path("experiments", ExperimentListApi.as_view(), name="experiment-list"),
    path("experiments/preview-assignment", AssignmentPreviewApi.as_view(), name="assignment-preview"),
    path("experiments/<slug:key>", ExperimentDetailApi.as_view(), name="experiment-detail"),
    path("experiments/<slug:key>/results", ResultsApi.as_view(), name="experiment-results"),
    path(
        "experiments/<slug:key>/results/compute",
        ResultsComputeApi.as_view(),
        name="experiment-results-compute",
    ),
    path("shadow-tests", ShadowTestListApi.as_view(), name="shadow-test-list"),
    path("shadow-tests/<slug:key>", ShadowTestDetailApi.as_view(), name="shadow-test-detail"),
    path("shadow-tests/<slug:key>/start", ShadowTestStartApi.as_view(), name="shadow-test-start"),
    path("shadow-tests/<slug:key>/stop", ShadowTestStopApi.as_view(), name="shadow-test-stop"),
    path("shadow-tests/<slug:key>/results", ShadowTestResultsApi.as_view(), name="shadow-test-results"),
    path("ops/kill-switches", KillSwitchListApi.as_view(), name="ops-kill-switches"),
    path("rollouts", RolloutCreateApi.as_view(), name="rollout-create"),
    path("rollouts/<slug:key>", RolloutDetailApi.as_view(), name="rollout-detail"),
    path("rollouts/<slug:key>/start", RolloutStartApi.as_view(), name="rollout-start"),
    path("rollouts/<slug:key>/pause", RolloutPauseApi.as_view(), name="rollout-pause"),
    path("rollouts/<slug:key>/rollback", RolloutRollbackApi.as_view(), name="rollout-rollback"),
]

urlpatterns = [
    # the hot path first: Django tries the patterns in order on every request
    path("v1/", include("routing.dropin.urls")),  # OpenAI/Anthropic SDK drop-ins
    path("api/v1/", include(api_v1)),
    path("admin/", admin.site.urls),
    path("api/schema/", SpectacularAPIView.as_view(), name="schema"),
    path("api/docs/", SpectacularSwaggerView.as_view(url_name="schema"), name="swagger-ui"),
    path("api/redoc/", SpectacularRedocView.as_view(url_name="schema"), name="redoc"),
    path("results/", results_index, name="results-index"),
    path("results/<slug:key>/", results_page, name="results-page"),
    path("favicon.ico", favicon, name="favicon"),
    path("results/shadow/<slug:key>/", shadow_results_page, name="shadow-results-page"),
    path("healthz", healthz, name="healthz"),
    path("readyz", readyz, name="readyz"),
    path("metrics", metrics_view, name="metrics"),
    path("results/<slug:key>/recompute", results_recompute, name="results-recompute"),
    path("routing/health/", routing_health_page, name="routing-health"),
]
