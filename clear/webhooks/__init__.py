"""Webhooks: a project's HTTP endpoints that are told about events (HMAC-SHA256 signed JSON, retried with backoff).

Other apps call `clear.webhooks.services.webhook_event_emit(project=, event=, payload=)`; see WEBHOOKS.md.
"""
