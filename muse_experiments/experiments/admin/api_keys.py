"""Admin for API keys: created through :func:`muse_experiments.api.auth.api_key_create` (the raw
key is shown once), deleted like a revocation."""

from __future__ import annotations

from django import forms
from django.contrib import admin
from django.core.exceptions import PermissionDenied
from django.db import transaction
from django.template.response import TemplateResponse

from muse_experiments.api.auth import SCOPES, api_key_create, api_keys_delete
from muse_experiments.infra import config_version

from ..models import ApiKey


class ApiKeyAddForm(forms.ModelForm):
    """New key: name, scopes and rate limit; the key itself is generated (``auth.api_key_create``)."""

    scopes = forms.MultipleChoiceField(
        choices=[(s, s) for s in SCOPES],
        widget=forms.CheckboxSelectMultiple,
        help_text="What the key may call.",
    )

    class Meta:
        model = ApiKey
        fields = ("name", "scopes", "rate_limit_per_minute", "owner")


@admin.register(ApiKey)
class ApiKeyAdmin(admin.ModelAdmin):
    """Keys are listed by their public prefix; the stored digest is never shown. Adding a key
    generates it and shows the raw key once, on the page answering the save (it is stored only as
    its SHA-256 digest, never in a message or the session); ``manage.py create_api_key`` does the
    same on the command line."""

    list_display = ("name", "prefix", "scopes", "rate_limit_per_minute", "created_at", "revoked_at")
    fields = ("name", "prefix", "scopes", "rate_limit_per_minute", "owner", "created_at", "revoked_at")
    readonly_fields = ("prefix", "created_at")

    def get_form(self, request, obj=None, change=False, **kwargs):
        if obj is None:
            kwargs["form"] = ApiKeyAddForm
        return super().get_form(request, obj, change=change, **kwargs)

    def get_fields(self, request, obj=None):
        return ("name", "scopes", "rate_limit_per_minute", "owner") if obj is None else self.fields

    def get_readonly_fields(self, request, obj=None):
        return () if obj is None else self.readonly_fields

    def save_model(self, request, obj, form, change):
        if change:
            with transaction.atomic():
                super().save_model(request, obj, form, change)
                config_version.bump()  # revocations, scopes and limits reach cached keys everywhere
            return None
        try:
            key, raw = api_key_create(
                name=form.cleaned_data["name"],
                scopes=form.cleaned_data["scopes"],
                rate_limit_per_minute=form.cleaned_data["rate_limit_per_minute"],
                owner=form.cleaned_data.get("owner"),
            )
        except ValueError as exc:  # the form already checks these; a race is still a clear error
            raise PermissionDenied(str(exc)) from None
        obj.pk = key.pk
        obj._raw_key = raw  # shown once by response_add, never stored

    def delete_model(self, request, obj):
        api_keys_delete(keys=[obj])  # like a revocation: cached keys everywhere drop it

    def delete_queryset(self, request, queryset):
        api_keys_delete(keys=queryset)

    def response_add(self, request, obj, post_url_continue=None):
        response = TemplateResponse(
            request,
            "admin/muse_experiments/apikey/created.html",
            {
                **self.admin_site.each_context(request),
                "opts": self.opts,
                "title": f"API key {obj.name} created",
                "key": ApiKey.objects.get(pk=obj.pk),
                "raw_key": obj._raw_key,
            },
        )
        response["Cache-Control"] = "no-store"
        return response
