"""URLs of the drop-in endpoints, mounted at ``/v1/`` so SDK base URLs are ``<host>/v1``."""

from django.urls import path

from .views import ChatCompletionsApi, MessagesApi, ResponsesApi

urlpatterns = [
    path("chat/completions", ChatCompletionsApi.as_view(), name="dropin-chat-completions"),
    path("responses", ResponsesApi.as_view(), name="dropin-responses"),
    path("messages", MessagesApi.as_view(), name="dropin-messages"),
]
