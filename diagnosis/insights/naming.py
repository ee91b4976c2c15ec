"""Names, root causes and recommendations of insights.

Offline (no model): the clustering library's names (title = the medoid statement shortened, description with the
size, traces, nodes and the medoid quoted, c-TF-IDF terms kept apart); the root cause and recommendation are
computed facts (facts.py).

With a model (the run's `model`, else settings.CLEAR_JUDGE_MODEL; CLEAR_JUDGE_API_BASE / CLEAR_JUDGE_API_KEY), one
call per cluster through the shared LLM client (clear/llm.py: transient failures retried once, one repair request;
max_tokens NAMING_MAX_TOKENS, the schema in response_format per CLEAR_JUDGE_STRUCTURED_OUTPUT; timeout and
ceiling from CLEAR_JUDGE_*) returns {title, description, root_cause, recommendation} as JSON, validated with the
LLM judges' schema validator and cached in the judge cache (a re-run on the same statements makes no call). Any
failure keeps the offline name: the library catches the namer's exceptions.
"""

from __future__ import annotations

import functools
import json
import logging
from dataclasses import dataclass, field

from django.conf import settings

from clear.llm import Check, LlmEndpoint, LlmUsage, llm_complete, llm_json_complete
from clear.llm_limits import NAMING_MAX_TOKENS, llm_limits_from_settings, max_tokens_capped
from diagnosis.services.cache import judge_cache_get, judge_cache_key, judge_cache_put

logger = logging.getLogger(__name__)

NAMING_JUDGE = "insight.naming"
PROMPT_VERSION = "naming-v3"  # v3: replies checked for grounding (a cached v2 name was never checked)
MAX_EXAMPLES = 8
MAX_FAILURES = 3  # consecutive failed calls after which a build stops asking (an unreachable or broken endpoint)
MAX_ERRORS = 5  # error texts kept for the build summary
MAX_RETRIES = 1  # at most (CLEAR_JUDGE_MAX_RETRIES if lower): naming is optional, a failing provider costs little

NAMING_SCHEMA = {
    "type": "object",
    "required": ["title", "description", "root_cause", "recommendation"],
    "properties": {
        "title": {"type": "string", "minLength": 3},
        "description": {"type": "string"},
        "root_cause": {"type": "string"},
        "recommendation": {"type": "string"},
    },
}

# The fields are described in prose and the shape shown by an example title: a reply template whose values are the
# fields' descriptions gets those descriptions back as the name from small models ("at most 80 characters, …").
EXAMPLE_TITLE = ("`router` sends cancellation requests to `search_worker` (violates \u201cCancellations are routed to "
                 "accounts\u201d)")
NAMING_SYSTEM = (
    "You are Clear's failure analyst. You get a cluster of issue statements that judges wrote about the steps of "
    "an LLM agent (one recurring failure pattern), with the node where they were found and the cluster's "
    "distinctive terms. Name the pattern and explain it, using only what the statements support.\n"
    "Reply with one JSON object with the string fields title, description, root_cause and recommendation.\n"
    "The title says what goes wrong and where, in plain words, in under 80 characters: the node or tool that does "
    "it, in backticks, and what it does wrong; no ids, numbers or quoted values of a single occurrence. When the "
    "statements say the pattern violates a rubric (\u201cviolates \u2026\u201d), the title ends with that rubric in "
    "parentheses. An example title, from another agent (name this cluster's pattern, do not copy it): "
    + EXAMPLE_TITLE + "\n"
    "The description says in 2 or 3 sentences what goes wrong and where; the root_cause, the most likely cause in "
    "the agent's code, prompt, tools or routing; the recommendation, one concrete fix a developer can apply."
)
_INSTRUCTION_WORDS = ("80 characters", "names the failure", "plain words", "from another agent")


def naming_problems(reply, *, evidence=None) -> list[str]:
    """Schema problems, a field that copies the prompt's example or instructions instead of naming the cluster (the
    judges' echo check, clear/text_echo.py), and with `evidence` (naming_evidence) a text that is not
    grounded in the cluster's statements (clear/text_grounding.py): a title over 80 characters, naming no
    failure, or naming an agent, tool or quoted value the statements do not hold."""
    from clear.text_echo import ECHO_MARK, echo_problems, echo_reference, text_fields
    from clear.text_grounding import grounding_problems
    from diagnosis.judges.llm.schema import validate

    problems = validate(reply, NAMING_SCHEMA)
    if problems:
        return problems
    title = " ".join(reply["title"].split())
    if title == EXAMPLE_TITLE or any(words in title.lower() for words in _INSTRUCTION_WORDS):
        return [f"$.title: {ECHO_MARK}'s instructions; name this cluster's failure pattern"]
    problems = echo_problems(fields=text_fields(reply), reference=echo_reference(texts=[NAMING_SYSTEM, EXAMPLE_TITLE]))
    if evidence is not None:
        problems += grounding_problems(path="$.title", text=title, evidence=evidence, title=True)
        for key in ("description", "root_cause"):
            problems += grounding_problems(path=f"$.{key}", text=reply[key], evidence=evidence)
        # A recommendation may propose what does not exist yet (a check, a tool): only its backticked names count.
        problems += grounding_problems(path="$.recommendation", text=reply["recommendation"], evidence=evidence,
                                       names=False)
    return problems


def naming_evidence(request, *, tasks: list[str] = ()):
    """What a cluster's name may draw on: its statements (medoid and examples), nodes and distinctive terms; and the
    tasks of its traces, which a title must not restate."""
    from clear.text_grounding import grounding_evidence

    cluster = request.cluster
    return grounding_evidence(texts=[request.medoid_text, *request.example_texts, cluster.node or "",
                                     *map(str, cluster.nodes), *request.terms], tasks=tasks)


MAX_TASKS = 5


def cluster_tasks(*, project_id: int, trace_ids: list[str]) -> list[str]:
    """The goals (root span inputs) of up to MAX_TASKS of a cluster's traces, as text."""
    from django.db.models import F

    from traces.models import Span

    rows = (Span.objects.filter(project_id=project_id, trace__project_id=project_id,
                                trace__trace_id__in=list(trace_ids)[:MAX_TASKS], span_id=F("trace__root_span_id"))
            .values_list("input", flat=True)[:MAX_TASKS])
    return [value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)[:2000]
            for value in rows if value not in (None, "", [], {})]


@dataclass
class NamingUsage(LlmUsage):
    cached: int = 0
    failed: int = 0
    replaced: int = 0  # names the model wrote that failed the checks after the repair: the computed text stands
    errors: list[str] = field(default_factory=list)
    streak: int = 0  # consecutive failures


def naming_model(*, run_model: str = "") -> str:
    return run_model or getattr(settings, "CLEAR_JUDGE_MODEL", "") or ""


def llm_namer_build(*, model: str, usage: NamingUsage, wanted: set[str] | None = None, cache_only: bool = False,
                    project_id: int | None = None):
    """An LLMNamer for diagnosis.clustering.name_clusters, or None without a model. `wanted`: the cluster ids to
    offer to the model (others keep the offline name without a call); None = all. `cache_only`: names from the
    judge cache only, never a call (a miss keeps the offline name), for use under a lock: the build asks the model
    before it takes one (services/insights.py). `project_id`: where the clusters' traces are, so that a title
    restating their task is refused (grounding)."""
    if not model:
        return None
    from diagnosis.clustering import ClusterName

    limits = llm_limits_from_settings()
    endpoint = LlmEndpoint(model=model, api_base=getattr(settings, "CLEAR_JUDGE_API_BASE", "") or None,
                           api_key=getattr(settings, "CLEAR_JUDGE_API_KEY", "") or None, timeout=limits.timeout,
                           max_retries=min(MAX_RETRIES, limits.max_retries),
                           max_tokens=max_tokens_capped(wanted=NAMING_MAX_TOKENS, ceiling=limits.max_tokens),
                           max_tokens_ceiling=limits.max_tokens, structured_output=limits.structured_output)

    def namer(request):
        cluster = request.cluster
        if (wanted is not None and cluster.id not in wanted) or usage.streak >= MAX_FAILURES:
            return None
        payload = {
            "level": cluster.level, "node": cluster.node or None, "statements": cluster.size,
            "traces": len(cluster.trace_ids), "nodes": dict(list(cluster.nodes.items())[:5]),
            "medoid": request.medoid_text, "examples": request.example_texts[:MAX_EXAMPLES],
            "distinctive_terms": request.terms,
        }
        messages = [{"role": "system", "content": NAMING_SYSTEM},
                    {"role": "user", "content": json.dumps(payload, ensure_ascii=False)}]
        key = judge_cache_key(judge=NAMING_JUDGE, prompt_version=PROMPT_VERSION, model=model, content=messages)
        tasks = cluster_tasks(project_id=project_id, trace_ids=cluster.trace_ids) if project_id else []
        evidence = naming_evidence(request, tasks=tasks)
        check = functools.partial(naming_problems, evidence=evidence)
        hit = judge_cache_get(key=key)
        value = hit.get("output") if isinstance(hit, dict) else None
        if isinstance(hit, dict) and hit.get("rejected"):
            usage.cached += 1
            return _computed(request=request, reason=str(hit["rejected"]))
        if isinstance(value, dict) and not check(value):
            usage.cached += 1
        elif cache_only:
            return None
        else:
            value, rejected = _call(endpoint=endpoint, messages=messages, usage=usage, check=check)
            if rejected:
                # The model answered but its text failed the checks twice: the computed text is shown, with why
                # (cached, so the locked pass and a re-run on the same statements say the same without a call).
                usage.replaced += 1
                usage.streak = 0
                judge_cache_put(key=key, result={"rejected": rejected, "model": model})
                return _computed(request=request, reason=rejected)
            if value is None:
                usage.failed += 1
                usage.streak += 1
                return None
            usage.streak = 0
            judge_cache_put(key=key, result={"output": value, "model": model})
        return ClusterName(
            title=" ".join(value["title"].split())[:300], description=value["description"].strip(), terms=request.terms,
            source="llm", root_cause=value["root_cause"].strip(), recommendation=value["recommendation"].strip(),
        )

    return namer


def _computed(*, request, reason: str):
    """The offline name of the cluster, saying why the model's was not used."""
    from dataclasses import replace

    from diagnosis.clustering import ClusterName

    offline = getattr(request, "offline", None) or ClusterName(title="", description="", terms=list(request.terms))
    return replace(offline, source="offline", note=reason)


def _call(*, endpoint: LlmEndpoint, messages: list[dict], usage: NamingUsage,
          check: Check) -> tuple[dict | None, str]:
    """(the valid name, "") or (None, "") when the call failed (counted, the reason kept in usage.errors), or
    (None, reason) when the model's text still echoed the prompt or was not grounded after the repair."""
    from clear.text_echo import ECHO_MARK
    from clear.text_grounding import GROUNDING_MARK

    try:
        reply = llm_json_complete(
            messages=messages, check=check,
            complete=lambda conversation: llm_complete(endpoint=endpoint, messages=conversation, usage=usage,
                                                       schema=NAMING_SCHEMA, schema_name=NAMING_JUDGE))
    except Exception as exc:  # noqa: BLE001 - naming is optional: the offline name stays
        _failed(usage=usage, model=endpoint.model, error=f"{type(exc).__name__}: {str(exc)[:200]}")
        return None, ""
    if reply.problems and all(GROUNDING_MARK in p or ECHO_MARK in p for p in reply.problems):
        return None, "; ".join(reply.problems)[:1000]
    if reply.problems:
        _failed(usage=usage, model=endpoint.model, error="invalid name after one repair: "
                + "; ".join(reply.problems)[:200])
        return None, ""
    return reply.value, ""


def _failed(*, usage: NamingUsage, model: str, error: str) -> None:
    if len(usage.errors) < MAX_ERRORS:
        usage.errors.append(error)
    logger.warning("insights.naming_failed model=%s error=%s", model, error.split(":", 1)[0])
