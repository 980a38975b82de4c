"""Ops API: ``GET/POST /api/v1/ops/kill-switches`` (API-key scope ``ops``).

``GET`` lists every switch and the effective state this process routes by. ``POST`` turns one
switch on or off with a reason::

    POST /api/v1/ops/kill-switches
    {"scope": "provider", "target": "azure", "active": true, "reason": "Azure 5xx storm"}

Bad input answers 400 with field errors and writes nothing; each change is audited with the API
key's name as the actor and reaches every process within about a second.
"""

from __future__ import annotations

from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import serializers, status
from rest_framework.response import Response
from rest_framework.views import APIView

from muse_experiments.api.auth import HasScope
from muse_experiments.api.base import IdentifierField, StrictSerializer
from muse_experiments.api.keyed import api_actor, field_errors
from routing.guards.killswitch import kill_state
from routing.models import KillScope
from routing.ops_services import REASON_MAX, kill_switch_set
from routing.selectors import kill_switch_list


class KillSwitchOutputSerializer(serializers.Serializer):
    scope = serializers.ChoiceField(choices=KillScope.choices)
    target = serializers.CharField()
    active = serializers.BooleanField()
    reason = serializers.CharField()
    updated_by = serializers.CharField()
    updated_at = serializers.DateTimeField()


class EffectiveStateSerializer(serializers.Serializer):
    external_off = serializers.BooleanField(help_text="All external providers are off.")
    forced_by_env = serializers.BooleanField(help_text="MUSE_KILL_EXTERNAL is set in this process.")
    unreadable = serializers.BooleanField(help_text="State unreadable: failing closed.")


class KillSwitchListOutputSerializer(serializers.Serializer):
    switches = KillSwitchOutputSerializer(many=True)
    effective = EffectiveStateSerializer()


def _actor(request) -> str:
    return api_actor(request.user)


class KillSwitchListApi(APIView):
    """List kill switches, or turn one on or off."""

    permission_classes = [HasScope]
    required_scope = "ops"

    class InputSerializer(StrictSerializer):
        scope = serializers.ChoiceField(choices=KillScope.choices)
        target = IdentifierField(
            max_length=300,
            required=False,
            allow_blank=True,
            default="",
            help_text="Empty for all_external; provider key; endpoint public id or version label; experiment key; "
            "or <experiment key>/<variant key>.",
        )
        active = serializers.BooleanField(help_text="true turns the switch on (traffic off).")
        reason = serializers.CharField(max_length=REASON_MAX, help_text="Why; kept in the audit log.")
        control_traffic_to = IdentifierField(
            max_length=200,
            required=False,
            allow_blank=True,
            default="",
            help_text="Killing an experiment's control variant: the platform default endpoint's "
            "public id or version label, confirming that its units go there.",
        )

    @extend_schema(responses={200: KillSwitchListOutputSerializer})
    def get(self, request):
        state = kill_state()
        body = {
            "switches": kill_switch_list(),
            "effective": {
                "external_off": state.external_off or state.forced_by_env or state.unreadable,
                "forced_by_env": state.forced_by_env,
                "unreadable": state.unreadable,
            },
        }
        return Response(KillSwitchListOutputSerializer(body).data)

    @extend_schema(
        request=InputSerializer,
        responses={200: KillSwitchOutputSerializer, 400: OpenApiResponse(description="Field errors")},
    )
    def post(self, request):
        data = self.InputSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        d = data.validated_data
        with field_errors():
            switch = kill_switch_set(
                scope=d["scope"],
                target=d["target"],
                active=d["active"],
                reason=d["reason"],
                actor=_actor(request),
                control_traffic_to=d["control_traffic_to"],
            )
        return Response(KillSwitchOutputSerializer(switch).data, status=status.HTTP_200_OK)
