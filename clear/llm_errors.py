"""Why a model call failed, as a machine-readable cause, and which failures are worth another request.

Causes (stored with judge errors and run error entries, so that a run can group its failures):

* `timeout` (litellm.Timeout), `connection` (the server could not be reached or dropped the connection),
  `rate_limit` (429), `server_error` (5xx): transient, retried with backoff by clear.llm.llm_complete.
* `invalid_output`: replies that were not the JSON asked for, still after the one repair request.
* `invalid_output:length`: the reply was cut by the output token limit, also after one retry with the limit doubled.
* `invalid_output:echo`: a field of the reply copies the prompt's instructions or example
  (clear/text_echo.py), also after the one repair request.
* `invalid_output:refusal`: a field of the reply declines or speaks as the assistant ("I'm sorry, I can't assist
  with that"; clear/text_refusal.py), also after the one repair request.
* `invalid_output:inconsistent`: a verdict whose label and score disagree (fail with a score above 0.5, pass below
  it), also after the one repair request.
* `provider_error`: any other error the provider answered with (400, 401, 404...): a retry would get the same.
* `internal_error`: anything else (a bug on our side, not the model's).
"""

from __future__ import annotations

from types import ModuleType

TIMEOUT = "timeout"
CONNECTION = "connection"
RATE_LIMIT = "rate_limit"
SERVER_ERROR = "server_error"
INVALID_OUTPUT = "invalid_output"
LENGTH = "invalid_output:length"
ECHO = "invalid_output:echo"
REFUSAL = "invalid_output:refusal"
INCONSISTENT = "invalid_output:inconsistent"
PROVIDER_ERROR = "provider_error"
INTERNAL_ERROR = "internal_error"
CAUSES = (TIMEOUT, CONNECTION, RATE_LIMIT, SERVER_ERROR, INVALID_OUTPUT, LENGTH, ECHO, REFUSAL, INCONSISTENT,
          PROVIDER_ERROR, INTERNAL_ERROR)
TRANSIENT = frozenset({TIMEOUT, CONNECTION, RATE_LIMIT, SERVER_ERROR})


class LlmCallError(Exception):
    """A model call that produced nothing usable for a reason of ours (not a provider exception), with its cause."""

    def __init__(self, *, cause: str, message: str) -> None:
        super().__init__(message)
        self.cause = cause
        self.message = message


def _status_code(error: BaseException) -> int | None:
    status = getattr(error, "status_code", None)
    if status is None:
        status = getattr(getattr(error, "response", None), "status_code", None)
    try:
        return int(status) if status is not None else None
    except (TypeError, ValueError):
        return None


def llm_error_cause(*, error: BaseException, litellm: ModuleType | None = None) -> str:
    """The cause of a failed model call: one of CAUSES."""
    if isinstance(error, LlmCallError):
        return error.cause
    if litellm is None:
        from clear.llm import litellm_load  # late: LiteLLM takes seconds to import

        litellm = litellm_load()
    # Timeout first: LiteLLM's Timeout derives from the OpenAI SDK's connection error.
    if isinstance(error, litellm.Timeout):
        return TIMEOUT
    if isinstance(error, litellm.RateLimitError):
        return RATE_LIMIT
    # LiteLLM reports some providers' connection failures as a 500 ("Connection error."): the chain tells.
    transport = _transport_failure(error)
    if transport is not None:
        return transport
    if isinstance(error, litellm.APIConnectionError):
        return CONNECTION
    if isinstance(error, (litellm.InternalServerError, litellm.ServiceUnavailableError, litellm.BadGatewayError)):
        return SERVER_ERROR
    status = _status_code(error)
    if status is not None and status >= 500:
        return SERVER_ERROR
    if status == 429:
        return RATE_LIMIT
    if isinstance(error, litellm.APIError) or status is not None or _openai_error(error):
        return PROVIDER_ERROR
    return INTERNAL_ERROR


def _transport_failure(error: BaseException) -> str | None:
    """TIMEOUT or CONNECTION (refused, reset, closed without an answer) when the error's cause chain holds one."""
    import httpx
    import openai

    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, openai.APITimeoutError | httpx.TimeoutException):
            return TIMEOUT
        if isinstance(current, openai.APIConnectionError | httpx.TransportError | ConnectionError):
            return CONNECTION
        current = current.__cause__ or current.__context__
    return None


def _openai_error(error: BaseException) -> bool:
    try:
        import openai
    except ImportError:  # pragma: no cover
        return False
    return isinstance(error, openai.OpenAIError)
