"""What a backend's config may make the worker use: which of its environment variables a backend may hand to a
coding agent as its API key (issue 22), and which model endpoint the key goes to (issue 38).

A job's backend config names the variable (`api_key_env`), and whoever can start a job could otherwise name any of
the worker's: SECRET_KEY, DATABASE_URL. Only the names the operator lists in CLEAR_EVOLUTION_BACKEND_ENV_ALLOW are
taken, checked when the backend is built: at job creation, and again at each run (a job saved before the list
existed, or after the operator shortened it). The model endpoint of a job started through the API or the web UI
(model_host_check) is checked at its creation and again before each role (services/roles.py).
"""

from __future__ import annotations

from django.conf import settings

from clear.outbound import OutboundInvalidError, outbound_url_check, outbound_url_parse
from evolution.errors import BackendError

FIELD = "backend_config.api_key_env"


def api_key_env_check(*, name: str | None, backend: str) -> None:
    if not name:
        return
    allowed = [str(item) for item in settings.CLEAR_EVOLUTION_BACKEND_ENV_ALLOW]
    if name in allowed:
        return
    problem = (f"{name!r} is not a variable backends may read; the operator lists those in the setting "
               f"CLEAR_EVOLUTION_BACKEND_ENV_ALLOW ({', '.join(allowed) or 'none'})")
    raise BackendError(f"{backend} backend: {FIELD}: {problem}", extra={"fields": {FIELD: problem}})


MODEL_FIELDS = {"external": "model_url", "litellm": "api_base"}
_DEFAULT_PORT = 443  # a CLEAR_EVOLUTION_MODEL_HOSTS entry without a port: the https default


def _model_refusal(backend: str, where: str, problem: str) -> BackendError:
    return BackendError(f"{backend} backend: {where}: {problem}", extra={"fields": {where: problem}})


def _listed(*, host: str, port: int) -> bool:
    """Whether host:port is one of CLEAR_EVOLUTION_MODEL_HOSTS ("host", "host:port", "[v6]:port", a bare IPv6
    address); an entry without a port means 443, so that listing api.openai.com does not open its other ports."""
    for entry in (str(item).strip().lower() for item in settings.CLEAR_EVOLUTION_MODEL_HOSTS):
        if entry.startswith("["):
            name, _, rest = entry[1:].partition("]")
            port_text = rest[1:] if rest.startswith(":") else ""
        elif entry.count(":") == 1:
            name, port_text = entry.split(":")
        else:  # a host, or an IPv6 address without brackets (no port can follow it)
            name, port_text = entry, ""
        if port_text and not port_text.isdigit():
            continue
        if name.rstrip(".") == host.rstrip(".") and (int(port_text) if port_text else _DEFAULT_PORT) == port:
            return True
    return False


def _model_url(*, backend: str, config: dict, default_url: str | None) -> tuple[str | None, str, str, bool]:
    """(the URL the backend's model calls go to, the field that decides it, what the URL is in a message, whether
    it is the operator's: then neither it nor its host is named, an API key holder has no business reading it)."""
    from .model_endpoints import model_default_endpoint

    field = MODEL_FIELDS[backend]
    url = config.get(field)
    if backend == "litellm" and not url:  # the backend reads `api_base or None`: litellm's own choice decides
        model = config.get("model")
        endpoint = model_default_endpoint(model=model)
        if endpoint.unknown:
            problem = (f"litellm's provider {endpoint.provider!r} has no endpoint Clear can check; give api_base, "
                       "one of the hosts the setting CLEAR_EVOLUTION_MODEL_HOSTS lists")
            raise _model_refusal(backend, "backend_config.model", problem)
        if endpoint.variable:
            return (endpoint.url, "backend_config.model",
                    f"{model!r} with no api_base calls the URL in the operator's {endpoint.variable}", True)
        return endpoint.url, "backend_config.model", f"{model!r} with no api_base calls {endpoint.url}", False
    if url is None:
        url = default_url
    return url, f"backend_config.{field}", "", False


def model_host_check(*, backend: str, config: dict, default_url: str | None = None) -> None:
    """A job started through the API or the web UI talks to a model endpoint the operator allows: the key named by
    api_key_env goes there, and the litellm backend calls it from the worker, so a free URL would hand the key to
    any host or reach the worker's internal network. The endpoint checked is the one that would be called: litellm's
    api_base, else where litellm sends the model without one (ollama's http://localhost:11434, …:
    model_endpoints.py); the external backend's model_url, else the template's (`default_url`). It must be https
    (unless CLEAR_EVOLUTION_MODEL_ALLOW_HTTP), its host and port one of CLEAR_EVOLUTION_MODEL_HOSTS, and its address
    a public one (unless CLEAR_EVOLUTION_MODEL_ALLOW_PRIVATE; clear.outbound, purpose "model"). Raises BackendError,
    a 400 naming backend_config.api_base, .model or .model_url."""
    if backend not in MODEL_FIELDS:
        return
    url, where, origin, hidden = _model_url(backend=backend, config=config, default_url=default_url)
    if not url:
        return
    if not isinstance(url, str):
        raise _model_refusal(backend, where, "must be the model API's URL, e.g. https://api.openai.com/v1")
    authority = url.split("//", 1)[-1].split("/", 1)[0].split("?", 1)[0].split("#", 1)[0]
    if "@" in authority or "\\" in url:
        # Parsers disagree on such a URL's host (urlsplit reads http://127.0.0.1:8210\@api.openai.com as
        # api.openai.com, urllib as 127.0.0.1), so the host checked here need not be the one called.
        problem = "a model URL may not hold user info ('@') or a backslash; name the key in api_key_env"
        raise _model_refusal(backend, where, f"{origin}: {problem}" if origin else problem)
    def refusal(problem: str, host: str = "") -> BackendError:
        if hidden and host:
            problem = problem.replace(host, "its host")
        return _model_refusal(backend, where, f"{origin}: {problem}" if origin else problem)

    try:
        target = outbound_url_parse(url=url, purpose="model", field=where)
    except OutboundInvalidError as exc:
        raise refusal("it is not a usable URL" if hidden else exc.extra["fields"][where][0]) from None
    if not _listed(host=target.host, port=target.port):
        allowed = [str(item).lower() for item in settings.CLEAR_EVOLUTION_MODEL_HOSTS]
        problem = (f"{target.host}:{target.port} is not a model host the operator allows; the setting "
                   f"CLEAR_EVOLUTION_MODEL_HOSTS lists them ({', '.join(allowed) or 'none'}; a host without a port "
                   "means port 443)")
        raise refusal(problem, f"{target.host}:{target.port}")
    try:
        outbound_url_check(url=url, purpose="model", field=where)
    except OutboundInvalidError as exc:
        raise refusal(exc.extra["fields"][where][0], target.host) from None


def backend_model_check(*, backend: str, config) -> None:
    """model_host_check for a job's backend and config, with the external template's default model URL."""
    from .templates import TEMPLATES

    if not isinstance(config, dict):
        return  # backend_get says what it must be
    template = TEMPLATES.get(config.get("template")) if backend == "external" else None
    model_host_check(backend=backend, config=config, default_url=getattr(template, "default_model_url", None))
