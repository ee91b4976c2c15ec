"""Names, root causes and recommendations of insights.

Offline (no model): the clustering library's names (title = the medoid statement shortened, description with the
size, traces, nodes and the medoid quoted, c-TF-IDF terms); the root cause says where the statements come from and
quotes the medoid, the recommendation is built from the medoid and the distinctive terms.

With a model (the run's `model`, else settings.CLEAR_JUDGE_MODEL; CLEAR_JUDGE_API_BASE / CLEAR_JUDGE_API_KEY), one
LiteLLM call per cluster returns {title, description, root_cause, recommendation} as JSON, validated with the LLM
judges' schema validator and cached in the judge cache (a re-run on the same statements makes no call). Any failure
keeps the offline name: the library catches the namer's exceptions.
"""

from __future__ import annotations

import json
import logging
import os
import re
from collections import Counter
from dataclasses import dataclass, field

from django.conf import settings

from diagnosis.services.cache import judge_cache_get, judge_cache_key, judge_cache_put

logger = logging.getLogger(__name__)

NAMING_JUDGE = "insight.naming"
PROMPT_VERSION = "naming-v1"
MAX_EXAMPLES = 8
MAX_FAILURES = 3  # consecutive failed calls after which a build stops asking (an unreachable or broken endpoint)
_FENCE = re.compile(r"^```(?:json)?\s*(.*?)\s*```$", re.DOTALL)

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

NAMING_SYSTEM = (
    "You are Clear's failure analyst. You get a cluster of issue statements that judges wrote about the steps of "
    "an LLM agent (one recurring failure pattern), with the node where they were found and the cluster's "
    "distinctive terms. Name the pattern and explain it. Reply with one JSON object: {\"title\": \"at most 80 "
    "characters, names the failure, not the symptom's ids\", \"description\": \"2-3 sentences: what goes wrong and "
    "where\", \"root_cause\": \"the most likely cause in the agent's code, prompt, tools or routing\", "
    "\"recommendation\": \"one concrete fix a developer can apply\"}. Use only what the statements support."
)


@dataclass
class NamingUsage:
    calls: int = 0
    cached: int = 0
    failed: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    errors: list[str] = field(default_factory=list)
    streak: int = 0  # consecutive failures


def naming_model(*, run_model: str = "") -> str:
    return run_model or getattr(settings, "CLEAR_JUDGE_MODEL", "") or ""


def offline_root_cause(*, medoid: str, nodes: dict[str, int], judges: dict[str, int], size: int) -> str:
    where = ", ".join(f"{node} ({n})" for node, n in list(nodes.items())[:3] if node) or "whole-trace feedback"
    by = ", ".join(f"{judge} ({n})" for judge, n in list(judges.items())[:3])
    return (f"{size} statement(s) from {where}, reported by {by}. The most typical statement: \u201c{medoid}\u201d "
            "(offline analysis; configure a judge model for a written root cause).")


def offline_recommendation(*, medoid: str, terms: list[str], node: str) -> str:
    focus = f" in {node}" if node else ""
    key = f" Look at what the statements share: {', '.join(terms[:5])}." if terms else ""
    return f"Fix the behaviour{focus} that makes judges report: \u201c{medoid}\u201d.{key}"


def _litellm():
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    import litellm

    litellm.suppress_debug_info = True
    return litellm


def _parse(content: str) -> dict | None:
    text = (content or "").strip()
    match = _FENCE.match(text)
    if match:
        text = match.group(1)
    try:
        value = json.loads(text)
    except json.JSONDecodeError:
        return None
    return value if isinstance(value, dict) else None


def llm_namer_build(*, model: str, usage: NamingUsage, wanted: set[str] | None = None):
    """An LLMNamer for diagnosis.clustering.name_clusters, or None without a model. `wanted`: the cluster ids to
    offer to the model (others keep the offline name without a call); None = all."""
    if not model:
        return None
    from diagnosis.clustering import ClusterName
    from diagnosis.judges.llm.schema import validate

    api_base = getattr(settings, "CLEAR_JUDGE_API_BASE", "") or None
    api_key = getattr(settings, "CLEAR_JUDGE_API_KEY", "") or None

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
        hit = judge_cache_get(key=key)
        value = hit.get("output") if isinstance(hit, dict) else None
        if isinstance(value, dict) and not validate(value, NAMING_SCHEMA):
            usage.cached += 1
        else:
            value = _call(model=model, api_base=api_base, api_key=api_key, messages=messages, usage=usage)
            if value is None or validate(value, NAMING_SCHEMA):
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


def _call(*, model: str, api_base: str | None, api_key: str | None, messages: list[dict],
          usage: NamingUsage) -> dict | None:
    litellm = _litellm()
    usage.calls += 1
    try:
        response = litellm.completion(
            model=model, messages=messages, api_base=api_base, api_key=api_key,
            response_format={"type": "json_object"}, temperature=0, timeout=60, num_retries=1, drop_params=True,
        )
    except Exception as exc:  # noqa: BLE001 - naming is optional: the offline name stays
        if len(usage.errors) < 5:
            usage.errors.append(f"{type(exc).__name__}: {str(exc)[:200]}")
        logger.warning("insights.naming_failed model=%s error=%s", model, type(exc).__name__)
        return None
    tokens = getattr(response, "usage", None)
    usage.input_tokens += int(getattr(tokens, "prompt_tokens", 0) or 0)
    usage.output_tokens += int(getattr(tokens, "completion_tokens", 0) or 0)
    return _parse(response.choices[0].message.content or "")


def judges_of(judges: list[str]) -> dict[str, int]:
    return dict(Counter(judges).most_common())
