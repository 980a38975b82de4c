"""Provider clients behind one interface (Django-free).

``client_for(endpoint).complete(endpoint, request) -> CompletionResult`` and
``.stream(endpoint, request) -> Iterator[StreamEvent]``; failures raise
:class:`~routing.providers.errors.ProviderError` subclasses. See ``types.py`` for shapes,
``errors.py`` for the exception tree, ``registry.py`` for client resolution.
"""

from routing.providers.errors import (
    AuthFailed,
    BadResponse,
    ClientRequestError,
    ConnectionFailed,
    ProviderError,
    RateLimited,
    StreamFailed,
    UpstreamTimeout,
    UpstreamUnavailable,
)
from routing.providers.pricing import compute_cost_usd
from routing.providers.registry import ProviderRegistry, client_for, get_client
from routing.providers.types import (
    CompletionRequest,
    CompletionResult,
    EndpointConfig,
    Message,
    ReasoningState,
    Secret,
    StreamEvent,
    ToolCall,
    ToolCallDelta,
    ToolSpec,
    Usage,
)

__all__ = [
    "AuthFailed",
    "BadResponse",
    "ClientRequestError",
    "CompletionRequest",
    "CompletionResult",
    "ConnectionFailed",
    "EndpointConfig",
    "Message",
    "ProviderError",
    "ProviderRegistry",
    "RateLimited",
    "ReasoningState",
    "Secret",
    "StreamEvent",
    "StreamFailed",
    "ToolCall",
    "ToolCallDelta",
    "ToolSpec",
    "UpstreamTimeout",
    "UpstreamUnavailable",
    "Usage",
    "client_for",
    "compute_cost_usd",
    "get_client",
]
