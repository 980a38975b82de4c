from django.apps import AppConfig


class RoutingConfig(AppConfig):
    name = "routing"
    verbose_name = "Routing (model catalogue, calls, kill switch)"

    def ready(self) -> None:
        """Provider error messages are checked with the project's encrypted-reasoning detector;
        the credential binding is parsed now, so a bad one stops every process at start-up
        (ImproperlyConfigured) rather than failing calls later; every call, once its records are
        written, is offered to the running shadow tests (:mod:`routing.pipeline.recorded`: the
        pipeline does not import the shadow package, whose calls are attempts of the pipeline's); a
        deleted shadow test's counters in Redis go with it (a new test may take its key)."""
        from django.db.models.signals import post_delete

        from muse_experiments.experiments.models import ShadowTest
        from routing.guards.credentials import credential_binding
        from routing.pipeline.recorded import on_recorded
        from routing.providers.errors import register_reasoning_detector
        from routing.shadow.sampling import shadow_offer

        register_reasoning_detector(holds_encrypted_reasoning)
        credential_binding()
        on_recorded(shadow_offer)
        post_delete.connect(_shadow_test_deleted, sender=ShadowTest, dispatch_uid="shadow-counters")


def _shadow_test_deleted(sender, instance, **_kwargs) -> None:
    """Forget the deleted shadow test's spend and drop counters once the deletion commits."""
    from django.db import transaction

    from routing.shadow.budget import counters_forget

    transaction.on_commit(lambda: counters_forget(instance.key))


def holds_encrypted_reasoning(text: str) -> bool:
    """True when :func:`routing.transcripts.gate.find_encrypted_reasoning` finds anything in ``text``,
    opaque blobs included (an error text has no business holding a random-looking blob of 96+
    bytes: a bare Anthropic signature looks exactly so)."""
    from routing.transcripts.gate import find_encrypted_reasoning

    return bool(find_encrypted_reasoning(text, opaque_blobs=True))
