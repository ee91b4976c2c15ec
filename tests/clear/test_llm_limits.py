"""The CLEAR_JUDGE_* model-call limits: read from the environment into the settings, from the settings (or the
environment without them) into the judges' config, and the invalid values refused."""

import runpy
from pathlib import Path

import pytest
from django.core.exceptions import ImproperlyConfigured

from clear.llm_limits import LlmLimits, llm_limits_from_settings, max_tokens_capped
from diagnosis.judges.llm import LlmJudgeConfig

BASE_SETTINGS = Path(__file__).resolve().parents[2] / "clear" / "settings" / "base.py"
NAMES = ("CLEAR_JUDGE_TIMEOUT_SECONDS", "CLEAR_JUDGE_MAX_RETRIES", "CLEAR_JUDGE_MAX_TOKENS",
         "CLEAR_JUDGE_STRUCTURED_OUTPUT")


def test_the_settings_read_the_environment(monkeypatch):
    for name, value in zip(NAMES, ("15", "5", "2048", "ON")):
        monkeypatch.setenv(name, value)
    values = runpy.run_path(str(BASE_SETTINGS))

    assert [values[name] for name in NAMES] == [15.0, 5, 2048, "on"]


def test_the_settings_have_defaults(monkeypatch):
    for name in NAMES:
        monkeypatch.delenv(name, raising=False)
    values = runpy.run_path(str(BASE_SETTINGS))

    assert [values[name] for name in NAMES] == [60.0, 3, 4096, "auto"]


def test_an_unknown_structured_output_mode_is_refused(monkeypatch):
    monkeypatch.setenv("CLEAR_JUDGE_STRUCTURED_OUTPUT", "sometimes")
    with pytest.raises(ImproperlyConfigured, match="auto, on, off or json_object_schema"):
        runpy.run_path(str(BASE_SETTINGS))


def test_the_judges_config_comes_from_the_settings(settings):
    settings.CLEAR_JUDGE_TIMEOUT_SECONDS = 12
    settings.CLEAR_JUDGE_MAX_RETRIES = 1
    settings.CLEAR_JUDGE_MAX_TOKENS = 900
    settings.CLEAR_JUDGE_STRUCTURED_OUTPUT = "off"
    assert llm_limits_from_settings() == LlmLimits(timeout=12.0, max_retries=1, max_tokens=900,
                                                   structured_output="off")

    config = LlmJudgeConfig.from_settings(model="openai/m")
    endpoint = config.endpoint(max_tokens=1024)
    assert (endpoint.timeout, endpoint.max_retries, endpoint.structured_output) == (12.0, 1, "off")
    assert endpoint.max_tokens == 900 and endpoint.max_tokens_ceiling == 900  # the kind's size, capped


def test_without_the_settings_the_environment_counts(settings, monkeypatch):
    for name in NAMES:
        delattr(settings, name)
    monkeypatch.setenv("CLEAR_JUDGE_MAX_TOKENS", "3000")
    monkeypatch.setenv("CLEAR_JUDGE_STRUCTURED_OUTPUT", "on")
    monkeypatch.delenv("CLEAR_JUDGE_TIMEOUT_SECONDS", raising=False)
    monkeypatch.delenv("CLEAR_JUDGE_MAX_RETRIES", raising=False)

    assert llm_limits_from_settings() == LlmLimits(timeout=60.0, max_retries=3, max_tokens=3000,
                                                   structured_output="on")


def test_a_size_is_capped_by_the_ceiling():
    assert max_tokens_capped(wanted=1024, ceiling=4096) == 1024
    assert max_tokens_capped(wanted=8192, ceiling=4096) == 4096
    assert max_tokens_capped(wanted=512, ceiling=None) == 512
