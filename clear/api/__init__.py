"""Shared plumbing of the REST API under /api/v1/: the base class every endpoint derives from, keyset (cursor)
pagination, the per-key rate limit, one-URL-several-APIs routing and the OpenAPI additions (auth schemes, error
responses)."""
