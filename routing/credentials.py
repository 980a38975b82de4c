"""Provider credentials, resolved at call time from the environment; never stored or logged.

A provider names a variable, e.g. ``AZURE_OPENAI_API_KEY``. The value comes from that variable,
or from the file named by ``AZURE_OPENAI_API_KEY_FILE`` (Docker/Kubernetes secrets), which wins
when both are set.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path


class MissingCredential(Exception):
    """The named credential is not configured in this process (the message names only the variable)."""


def resolve_credential(env_name: str) -> str:
    """Return the secret for ``env_name``. Raises MissingCredential when neither source is set."""
    file_path = os.environ.get(f"{env_name}_FILE")
    if file_path:
        try:
            value = Path(file_path).read_text().strip()
        except OSError as exc:
            raise MissingCredential(f"{env_name}_FILE is set but unreadable ({exc.strerror}).") from None
        if value:
            return value
    value = os.environ.get(env_name, "").strip()
    if not value:
        raise MissingCredential(f"Credential {env_name} is not set.")
    return value


def fingerprint(secret: str) -> str:
    """A short, non-reversible tag of a secret (first 12 hex of SHA-256) to tell credentials apart."""
    return hashlib.sha256(secret.encode()).hexdigest()[:12]
