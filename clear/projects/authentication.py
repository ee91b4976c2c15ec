"""The one way a client proves which project it writes to: a project key.

`Authorization: Bearer <secret>` or HTTP Basic `<public key>:<secret>` (what the Langfuse SDK sends). The ingestion
endpoints call `project_key_authenticate` directly; DRF views get it through `ProjectKeyAuthentication`. Wrong secrets
are counted per client address (and per public key from it, if one is sent): past CLEAR_AUTH_FAILURE_RATE every key
from there gets 429 until the window ends (clear/projects/auth_throttle.py).
"""

import base64
import binascii
from dataclasses import dataclass

from rest_framework.authentication import BaseAuthentication
from rest_framework.request import Request

from clear.errors import HOW_TO_AUTHENTICATE, AuthenticationError
from clear.projects.client_address import client_address_get
from clear.projects.models import ApiKey, Project
from clear.projects.selectors import api_key_get_by_secret_hash
from clear.projects.services import api_key_attempt_check, api_key_failure_record, api_key_touch, secret_hash


@dataclass(frozen=True)
class ProjectKeyUser:
    """The principal of a request authenticated by a project key (DRF puts it in `request.user`)."""

    api_key: ApiKey
    is_authenticated: bool = True
    is_anonymous: bool = False

    @property
    def project(self) -> Project:
        return self.api_key.project


def _parse_authorization(header: str) -> tuple[str | None, str]:
    scheme, _, credentials = header.strip().partition(" ")
    credentials = credentials.strip()
    if scheme.lower() == "bearer":
        if not credentials:
            raise AuthenticationError("The Bearer token is empty. " + HOW_TO_AUTHENTICATE, code="malformed_credentials")
        return None, credentials
    if scheme.lower() == "basic":
        try:
            decoded = base64.b64decode(credentials, validate=True).decode()
        except (binascii.Error, UnicodeDecodeError):
            raise AuthenticationError(
                "The Basic credentials are not valid base64 of '<public key>:<secret key>'.",
                code="malformed_credentials",
            ) from None
        public_key, sep, secret = decoded.partition(":")
        if not sep or not secret:
            raise AuthenticationError(
                "The Basic credentials must be '<public key>:<secret key>'; the secret is missing.",
                code="malformed_credentials",
            )
        return public_key, secret
    raise AuthenticationError(
        f"Unsupported authorization scheme {scheme!r}. " + HOW_TO_AUTHENTICATE, code="malformed_credentials"
    )


def project_key_authenticate(*, authorization: str | None, address: str) -> ApiKey:
    """The key of an Authorization header sent from `address` (client_address_get). Only wrong secrets count as
    failures: a missing or malformed header or a revoked key is a client's mistake, not a guess."""
    if not authorization:
        raise AuthenticationError("Missing API key. " + HOW_TO_AUTHENTICATE, code="missing_credentials")
    public_key, secret = _parse_authorization(authorization)
    api_key_attempt_check(public_key=public_key, address=address)
    api_key = api_key_get_by_secret_hash(secret_hash=secret_hash(secret))
    if api_key is None:
        api_key_failure_record(public_key=public_key, address=address)
        raise AuthenticationError(
            "The secret key is not valid: no project has it. Check for a typo, or create a new key.",
            code="invalid_credentials",
        )
    if public_key is not None and public_key != api_key.public_key:
        api_key_failure_record(public_key=public_key, address=address)
        raise AuthenticationError(
            "The public key does not belong to this secret key; send the pair shown when the key was created.",
            code="invalid_credentials",
        )
    if not api_key.is_active:
        raise AuthenticationError(
            f"This API key was revoked on {api_key.revoked_at:%Y-%m-%d}; create a new one under Settings → API keys.",
            code="revoked_credentials",
        )
    api_key_touch(api_key=api_key)
    return api_key


class ProjectKeyAuthentication(BaseAuthentication):
    def authenticate(self, request: Request) -> tuple[ProjectKeyUser, ApiKey] | None:
        authorization = request.META.get("HTTP_AUTHORIZATION")
        if not authorization:
            return None  # let session authentication try; permissions answer 401 if nobody is authenticated
        api_key = project_key_authenticate(authorization=authorization, address=client_address_get(meta=request.META))
        return ProjectKeyUser(api_key=api_key), api_key

    def authenticate_header(self, request: Request) -> str:
        return 'Bearer realm="clear"'
