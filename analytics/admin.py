from django.contrib import admin

from .models import OutcomeEvent, ResultSnapshot


@admin.register(OutcomeEvent)
class OutcomeEventAdmin(admin.ModelAdmin):
    list_display = ("event_id", "name", "session_id", "user_id", "value", "occurred_at")
    list_filter = ("name",)
    search_fields = ("event_id", "session_id", "user_id")


@admin.register(ResultSnapshot)
class ResultSnapshotAdmin(admin.ModelAdmin):
    list_display = ("experiment", "phase", "computed_at")
    readonly_fields = ("experiment", "phase", "computed_at", "inputs", "results")
