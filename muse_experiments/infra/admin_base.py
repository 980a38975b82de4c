"""Admin building blocks shared by every app's admin (knows no app)."""

from django.contrib import admin


class ReadOnlyAdmin(admin.ModelAdmin):
    """A list/detail view of records written only by services: no add, no change.

    ``can_delete_rows`` keeps deletion where an operator may need it (e.g. purging call logs) and
    turns it off for records that must stay (audit entries, phases).
    """

    can_delete_rows = True

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return self.can_delete_rows and super().has_delete_permission(request, obj)
