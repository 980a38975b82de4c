from django.contrib import admin
from django.http import JsonResponse
from django.urls import include, path
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerView

from analytics.apis import EventsCreateApi, ResultsApi
from analytics.views import results_index, results_page
from muse_experiments.apis import ExperimentDetailApi, ExperimentListApi
from routing.apis import CompletionCreateApi, CompletionDetailApi


def healthz(request):
    return JsonResponse({"status": "ok"})


api_v1 = [
    path("completions", CompletionCreateApi.as_view(), name="completion-create"),
    path("completions/<uuid:job_id>", CompletionDetailApi.as_view(), name="completion-detail"),
    path("events", EventsCreateApi.as_view(), name="events-create"),
    path("experiments", ExperimentListApi.as_view(), name="experiment-list"),
    path("experiments/<slug:key>", ExperimentDetailApi.as_view(), name="experiment-detail"),
    path("experiments/<slug:key>/results", ResultsApi.as_view(), name="experiment-results"),
]

urlpatterns = [
    path("admin/", admin.site.urls),
    path("api/schema/", SpectacularAPIView.as_view(), name="schema"),
    path("api/docs/", SpectacularSwaggerView.as_view(url_name="schema"), name="swagger-ui"),
    path("results/", results_index, name="results-index"),
    path("results/<slug:key>/", results_page, name="results-page"),
    path("healthz", healthz),
    path("api/v1/", include(api_v1)),
]
