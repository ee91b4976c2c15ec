"""The judge cache: a judge's result for content it has seen before, so a re-run on unchanged traces makes no
model calls. Keys hash the judge name, prompt version, model and the canonical content the judge sees."""

from __future__ import annotations

import hashlib
import json
from typing import Any

from django.db.models import F
from django.utils import timezone

from diagnosis.models import JudgeCacheEntry


def canonical_json(value: Any) -> str:
    return json.dumps(value, sort_keys=True, ensure_ascii=False, separators=(",", ":"), default=str)


def judge_cache_key(*, judge: str, prompt_version: str, model: str, content: Any) -> str:
    payload = canonical_json({"judge": judge, "prompt_version": prompt_version, "model": model, "content": content})
    return hashlib.sha256(payload.encode()).hexdigest()


def judge_cache_get(*, key: str) -> dict | None:
    entry = JudgeCacheEntry.objects.filter(key=key).values_list("result", flat=True).first()
    if entry is None:
        return None
    JudgeCacheEntry.objects.filter(key=key).update(hits=F("hits") + 1, last_hit_at=timezone.now())
    return entry


def judge_cache_put(*, key: str, result: dict) -> None:
    """Store (or replace) a result; concurrent writers of the same key simply agree on one row."""
    JudgeCacheEntry.objects.update_or_create(key=key, defaults={"result": result})
