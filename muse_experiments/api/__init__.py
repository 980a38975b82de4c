"""REST plumbing shared by every app's API: API-key authentication and the session permission
table (``auth``), failed-authentication counting (``auth_failures``), per-key rate limits
(``throttling``), the JSON parser, strict serializers and body middlewares (``base``), the error
shape (``errors``) and the OpenAPI schema class (``schema``).

It imports no app, except the experiments app's ``ApiKey`` model that ``auth`` authenticates
against (``.importlinter``).
"""
