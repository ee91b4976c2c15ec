"""Property-based requests from the served OpenAPI schema (schemathesis) against every /api/v1/ operation: no 5xx,
and every status, content type, header and body is one the schema documents. Each operation gets a bounded number
of generated requests, sent once as generated and once aimed at real objects of the key's project.

The evolution target create and update operations get many more, with bodies drawn by Hypothesis on top of
schemathesis's: a `source` from path-like strings (absolute, relative and `~`; components past the 255-byte name
limit; 4,096+ characters in all; unicode, NUL and control characters) and git-URL-like strings, and a `config`
from a valid evolution config with fields mutated (4,096+ character commands, wrong types, hot_swap sections,
unknown sandbox levels, deeply nested JSON).

Three more get bodies of their own (issue 38): evolution jobs whose model URL is drawn (user info, backslashes, odd
ports; no job is ever started), the issue tracker connected to a fake tracker whose every reply is drawn (status,
body, headers, issue links elsewhere) with a push and the reads after it, none of which may repeat the reply, and
/api/public/scores (outside /api/v1/) with values past the float range. The number of generated cases is written to
the terminal at the end of the module, and is each test's `generated_cases` user property (which xdist's workers send
to the controller)."""

import copy
import json
import re
import string
import subprocess
import sys
from collections import Counter

import pytest
import schemathesis
from django.core.signals import request_finished, request_started
from django.core.wsgi import get_wsgi_application
from django.db import close_old_connections
from django.test import override_settings
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_headers_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from diagnosis.tickets.models import Ticket
from evolution.models import EvolutionTarget
from examples.support_desk.target_repo import EVOLUTION_CONFIG
from tests.api.test_scoping import OPERATIONS, PATH_OBJECTS, QUERY_OBJECTS
from tests.tickets.fake_github import FakeGitHub

EXAMPLES_PER_OPERATION = 25
TARGET_EXAMPLES = 150  # per target operation, besides the explicit @examples
CHECKS = [not_a_server_error, status_code_conformance, content_type_conformance, response_headers_conformance,
          response_schema_conformance]
CASES: Counter = Counter()  # generated cases (and requests sent) by test, summed up at the end of the module
HUGE = 4096


@pytest.fixture(scope="module", autouse=True)
def _case_count(request):
    yield
    if not CASES:
        return
    total = CASES["all operations"] + CASES["target operations"] + CASES["side operations"]
    line = (f"schemathesis: {total} generated cases ({CASES['all operations']} over the schema's operations, "
            f"{CASES['target operations']} on the evolution target create and update operations, "
            f"{CASES['side operations']} on jobs' model URLs, the tracker and scores), {CASES['requests']} requests")
    reporter = request.config.pluginmanager.get_plugin("terminalreporter")
    capture = request.config.pluginmanager.get_plugin("capturemanager")
    if reporter is not None and capture is not None:
        with capture.global_and_fixture_disabled():
            reporter.ensure_newline()
            reporter.write_line(line)
    else:  # an xdist worker: the tests' generated_cases properties reach the controller instead
        print(line, file=sys.stderr)


SERVED: dict = {}  # the schema /api/schema/ served first: fetched once per process (half a second a test otherwise)


@pytest.fixture
def served_schema(db, settings):
    """The schema as /api/schema/ serves it, requests sent in-process through the WSGI application."""
    settings.CLEAR_API_RATE = ""  # hundreds of requests a minute from one key
    # The WSGI handler closes the database connection after each request, which would end the test's
    # transaction; Django's own test client switches this off the same way.
    request_started.disconnect(close_old_connections)
    request_finished.disconnect(close_old_connections)
    try:
        app = get_wsgi_application()
        if "raw" not in SERVED:
            SERVED["raw"] = schemathesis.openapi.from_wsgi("/api/schema/", app).raw_schema
        schema = schemathesis.openapi.from_dict(copy.deepcopy(SERVED["raw"]))  # a test's loader may resolve it in place
        schema.app, schema.location = app, "/api/schema/"
        yield schema
    finally:
        request_started.connect(close_old_connections)
        request_finished.connect(close_old_connections)


def _call_and_check(case, headers):
    response = case.call(headers=headers)
    CASES["requests"] += 1
    case.validate_response(response, checks=CHECKS, headers=headers)
    return response


# schemathesis's own pytest integration (from_fixture) does not run under pytest 9, so each operation is one
# parametrised test that draws its cases from schemathesis's strategy with Hypothesis.
@pytest.mark.parametrize("method, path", OPERATIONS, ids=[f"{m} {p}" for m, p in OPERATIONS])
def test_the_api_keeps_to_its_schema(method, path, served_schema, mine, request):
    operation = served_schema[path][method]
    before = CASES["all operations"]
    headers = {"Authorization": f"Bearer {mine.key.secret}"}
    names = re.findall(r"{(\w+)}", path)

    @given(case=operation.as_strategy())
    @settings(max_examples=EXAMPLES_PER_OPERATION, deadline=None, derandomize=True, database=None,
              suppress_health_check=list(HealthCheck))
    def check(case):
        CASES["all operations"] += 1
        _call_and_check(case, headers)
        if names or path in QUERY_OBJECTS:  # aimed at the key's real objects, so success bodies are checked too
            case.path_parameters = {name: PATH_OBJECTS[name](mine) for name in names}
            if path in QUERY_OBJECTS:
                case.query = {**(case.query or {}), **QUERY_OBJECTS[path](mine)}
                for side in ("base", "head"):  # the run ids name each side; a release as well would be a 400
                    case.query.pop(f"{side}_release", None)
            _call_and_check(case, headers)

    check()
    request.node.user_properties.append(("generated_cases", CASES["all operations"] - before))


# --- evolution targets: sources and configs ----------------------------------------------------------------------

def _repeat(seed: str, size: int) -> str:
    return (seed * (size // len(seed) + 1))[:size]


def _join(prefix: str, parts: list[str]) -> str:
    return prefix + "/".join(parts)


ROOT = "{root}"  # replaced in each source by a directory of the test, opened for sources (CLEAR_EVOLUTION_SOURCE_ROOTS)
# A path component past the 255-byte limit of a file name (in bytes: "é" is two, "中" three).
LONG_COMPONENT = st.builds(_repeat, st.sampled_from(["a", "é", "中", "x_y-", ".", " ", "a b", "\x01"]),
                           st.integers(250, 320))
COMPONENT = st.one_of(
    st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="/"), min_size=1, max_size=30),
    st.text(st.characters(min_codepoint=0, max_codepoint=0x1f), min_size=1, max_size=5),  # NUL and controls
    st.sampled_from([".", "..", "~", "-", "--help", " ", "\\", "C:", "*", "?", "agent", "escape", ".git"]),
)
PREFIXES = st.sampled_from(["", "/", "./", "../", "//", "~/", "~", "~root/", "~nouser/", " ", "\t/", f"{ROOT}/",
                            f"{ROOT}/agent/", f"{ROOT}/escape/", f"{ROOT}/../"])
PATHS = st.builds(_join, PREFIXES, st.lists(COMPONENT, min_size=1, max_size=6))
# One component past NAME_MAX among short ones: under 1,000 characters, so past the serializer's length check.
LONG_PATHS = st.builds(lambda prefix, before, long, after: _join(prefix, [*before, long, *after]), PREFIXES,
                       st.lists(COMPONENT, max_size=2), LONG_COMPONENT, st.lists(COMPONENT, max_size=2))
# 4,096+ characters: past the serializer's limit and Linux's PATH_MAX.
HUGE_PATHS = st.one_of(
    st.builds(_join, PREFIXES, st.lists(LONG_COMPONENT, min_size=17, max_size=20)),
    st.builds(lambda prefix, count, size: prefix + "/".join(["p" * size] * count), PREFIXES, st.integers(16, 18),
              st.integers(240, 255)),
)
HOSTS = st.builds(lambda name: f"{name}.invalid", st.from_regex(r"[a-z][a-z0-9-]{0,20}", fullmatch=True))
URL_PATH = st.lists(st.one_of(st.text(string.ascii_letters + string.digits + "-._~%", max_size=30), LONG_COMPONENT,
                              COMPONENT), max_size=4).map("/".join)
URLS = st.one_of(
    st.builds(lambda scheme, host, path: f"{scheme}{host}/{path}",
              st.sampled_from(["https://", "http://", "ssh://git@", "ssh://", "git://", "https://user:pw@",
                               "ftp://", "ext::", "HTTPS://"]), HOSTS, URL_PATH),
    st.builds(lambda path: f"file://{path}", st.one_of(PATHS, LONG_PATHS, HUGE_PATHS)),
    st.builds(lambda user, host, path: f"{user}@{host}:{path}", st.from_regex(r"[a-z][a-z0-9._]{0,10}", fullmatch=True),
              HOSTS, URL_PATH),
    st.builds(lambda host, size: f"https://{host}/" + "r" * size, HOSTS, st.integers(HUGE, HUGE + 1000)),
)
SOURCES = st.one_of(PATHS, LONG_PATHS, HUGE_PATHS, URLS, st.text())

JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text(),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=10), children, max_size=4),
    max_leaves=10,
)
NUMBERS = st.one_of(st.integers(), st.floats(allow_nan=False, allow_infinity=False),
                    st.integers(19, 400).map(lambda digits: 10 ** digits), st.sampled_from([0, -1, 0.0, -0.0, 1e-300]))
HUGE_TEXT = st.builds(_repeat, st.text(min_size=1, max_size=8), st.integers(HUGE, 2 * HUGE))
COMMANDS = ("install_command", "test_command", "trial_command", "grader_command", "health_command", "suite_command")
MINIMAL_CONFIG = {"editable_paths": ["agent/**"], "trial_command": "python run.py --task {task_id} --out {out}",
                  "grader_command": "python grade.py --out {out}"}
HOT_SWAP = EVOLUTION_CONFIG["hot_swap"]
ACTIVATORS = st.one_of(
    st.just(HOT_SWAP["activator"]),
    st.fixed_dictionaries({"kind": st.just("systemd"), "unit": st.sampled_from(["agent.service", "two words"])},
                          optional={"timeout_s": NUMBERS}),
    st.fixed_dictionaries({"kind": st.just("kubernetes"), "deployment": st.just("agent"), "container": st.just("app"),
                           "image": st.sampled_from(["registry.example/agent:{release_id}", "{nope}", ""])},
                          optional={"namespace": JSON_VALUES, "rollout_timeout_s": NUMBERS}),
    st.fixed_dictionaries({"kind": st.sampled_from(["process", "lambda", ""])},
                          optional={"command": st.one_of(HUGE_TEXT, st.text(), JSON_VALUES), "env": JSON_VALUES,
                                    "stop_timeout_s": NUMBERS}),
    JSON_VALUES,
)
PROBES = st.one_of(
    st.sampled_from(HOT_SWAP["probes"]),
    st.fixed_dictionaries({"kind": st.just("http"), "url": st.one_of(URLS, st.text())},
                          optional={"expect_status": NUMBERS, "timeout_s": NUMBERS}),
    st.fixed_dictionaries({"kind": st.sampled_from(["command", "heartbeat", "process_alive", "smoke"])},
                          optional={"command": st.one_of(HUGE_TEXT, st.text()), "path": st.one_of(PATHS, HUGE_PATHS),
                                    "max_age_s": NUMBERS, "timeout_s": NUMBERS}),
    JSON_VALUES,
)
HOT_SWAP_SECTIONS = st.one_of(
    st.just(HOT_SWAP),
    st.fixed_dictionaries(
        {"activator": ACTIVATORS},
        optional={"probes": st.lists(PROBES, max_size=4),
                  "preflight_commands": st.lists(st.one_of(st.text(), HUGE_TEXT, st.just("python -c 'pass'")),
                                                 max_size=3),
                  "preflight_timeout_s": NUMBERS,
                  "health": st.fixed_dictionaries({}, optional={"interval_s": NUMBERS, "window_s": NUMBERS,
                                                                "passes_required": NUMBERS}),
                  "keep_releases": NUMBERS}),
    JSON_VALUES,
)
CONFIG_KEYS = sorted({*MINIMAL_CONFIG, *EVOLUTION_CONFIG})


def _nested(depth: int, leaf, kind: str):
    for _ in range(depth):
        leaf = {"a": leaf} if kind == "object" else [leaf]
    return leaf


# Each mutation changes a config in place with values it draws.
def _mutate_huge_command(draw, config):
    field = draw(st.sampled_from(COMMANDS))
    base = MINIMAL_CONFIG.get(field, "python -m agent")
    config[field] = draw(st.one_of(st.builds(lambda text: f"{base} {text}", HUGE_TEXT), HUGE_TEXT))


def _mutate_wrong_type(draw, config):
    field = draw(st.sampled_from([*CONFIG_KEYS, "diff_budget.max_files", "hot_swap.health"]))
    if "." in field:
        head, tail = field.split(".")
        if not isinstance(config.get(head), dict):
            config[head] = {}
        config[head][tail] = draw(JSON_VALUES)
    else:
        config[field] = draw(st.one_of(JSON_VALUES, NUMBERS))


def _mutate_hot_swap(draw, config):
    config["hot_swap"] = draw(HOT_SWAP_SECTIONS)


def _mutate_sandbox_levels(draw, config):
    config["sandbox_levels"] = draw(st.lists(st.one_of(
        st.sampled_from(["bwrap", "subprocess", "docker", "gvisor", "none", "", "BWRAP"]), st.text(), JSON_VALUES),
        max_size=5))


def _mutate_nested(draw, config):
    field = draw(st.sampled_from([*CONFIG_KEYS, "unknown"]))
    config[field] = _nested(draw(st.integers(1, 200)), draw(JSON_VALUES), draw(st.sampled_from(["object", "list"])))


def _mutate_numbers(draw, config):
    field = draw(st.sampled_from(["trials", "trial_timeout_s", "diff_budget"]))
    if field == "diff_budget":
        config[field] = {"max_files": draw(NUMBERS), "max_lines": draw(NUMBERS)}
    else:
        config[field] = draw(NUMBERS)


def _mutate_globs(draw, config):
    config[draw(st.sampled_from(["editable_paths", "denied_paths"]))] = draw(st.lists(
        st.one_of(PATHS, HUGE_PATHS, st.sampled_from(["**", "/abs/**", "../up/**", "a/../../b", " "])), max_size=4))


def _mutate_drop(draw, config):
    if config:
        config.pop(draw(st.sampled_from(sorted(config))))


def _mutate_extra(draw, config):
    config[draw(st.text(max_size=20))] = draw(JSON_VALUES)


MUTATIONS = [_mutate_huge_command, _mutate_wrong_type, _mutate_hot_swap, _mutate_sandbox_levels, _mutate_nested,
             _mutate_numbers, _mutate_globs, _mutate_drop, _mutate_extra]


@st.composite
def target_configs(draw):
    """A valid config (minimal, or the support desk's with its hot_swap section) with up to three mutations."""
    config = copy.deepcopy(draw(st.sampled_from([MINIMAL_CONFIG, EVOLUTION_CONFIG])))
    for _ in range(draw(st.integers(0, 3))):
        draw(st.sampled_from(MUTATIONS))(draw, config)
    return config


CONFIGS = st.one_of(target_configs(), st.none(), JSON_VALUES)
TARGET_BODIES = {
    # Merged over schemathesis's body: its name, default_branch and push_url (and its config when none is drawn).
    "POST": st.fixed_dictionaries({"source": SOURCES}, optional={"config": CONFIGS}),
    "PATCH": st.fixed_dictionaries({}, optional={"source": SOURCES, "config": CONFIGS}),
}
TARGET_OPERATIONS = [("POST", "/api/v1/evolution/targets/"), ("PATCH", "/api/v1/evolution/targets/{target_id}/")]
# Sent every run, before the generated ones. On the parent of the fix (a2ab71c) the first four, `~nouser/agent` and
# the hot_swap passes_required of 400 digits were 500s (OSError: File name too long, RuntimeError: Could not determine
# home directory, OverflowError from the health window check); the rest are sources of 4,096+ characters, a
# repository under the source root, a link out of it, and configs at the edges.
TARGET_EXAMPLE_BODIES = [
    {"source": "/tmp/" + "a" * 300, "config": MINIMAL_CONFIG},
    {"source": "a" * 300, "config": MINIMAL_CONFIG},
    {"source": f"{ROOT}/" + "a" * 300, "config": MINIMAL_CONFIG},
    {"source": ("/" + "b" * 299) * 3},
    {"source": "/srv/agents/" + "é" * 200 + "/repo", "config": MINIMAL_CONFIG},
    {"source": ("/" + "p" * 255) * 16, "config": MINIMAL_CONFIG},  # 4,096 characters, every component at NAME_MAX
    {"source": f"{ROOT}/agent" + ("/" + "p" * 255) * 16, "config": MINIMAL_CONFIG},
    {"source": "/" + "c" * (HUGE + 10), "config": MINIMAL_CONFIG},
    {"source": "file:///" + "d" * 300, "config": MINIMAL_CONFIG},
    {"source": "~nouser/agent", "config": MINIMAL_CONFIG},
    {"source": f"{ROOT}/agent"},  # a repository with its own evolution.json
    {"source": f"{ROOT}/escape/etc", "config": MINIMAL_CONFIG},
    {"source": "https://git.example.invalid/acme/agent.git",
     "config": {**MINIMAL_CONFIG, "trial_command": MINIMAL_CONFIG["trial_command"] + " " + "x" * HUGE}},
    {"source": "git@example.invalid:acme/agent.git",
     "config": {**EVOLUTION_CONFIG, "hot_swap": {**HOT_SWAP, "health": {"passes_required": 10 ** 400}}}},
    {"source": "ssh://git@example.invalid/agent", "config": {**MINIMAL_CONFIG, "sandbox_levels": ["gvisor"]}},
    {"source": "/\x00/agent\x1b[31m", "config": _nested(150, {"editable_paths": ["**"]}, "object")},
]


def _git_repository(path, config: dict) -> None:
    env = {"PATH": "/usr/bin:/bin", "GIT_CONFIG_GLOBAL": "/dev/null", "GIT_CONFIG_NOSYSTEM": "1",
           "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.invalid", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@example.invalid"}
    path.mkdir(parents=True)
    (path / "evolution.json").write_text(json.dumps(config))
    for args in (["init", "-q", "-b", "main"], ["add", "evolution.json"], ["commit", "-q", "-m", "config"]):
        subprocess.run(["git", *args], cwd=path, env=env, check=True, capture_output=True)


@pytest.mark.parametrize("method, path", TARGET_OPERATIONS, ids=[f"{m} {p}" for m, p in TARGET_OPERATIONS])
def test_target_sources_and_configs_keep_to_the_schema(method, path, served_schema, mine, tmp_path, monkeypatch,
                                                         request):
    operation = served_schema[path][method]
    headers = {"Authorization": f"Bearer {mine.key.secret}"}
    # A directory open for sources, holding a repository and a link out of it; relative and ~ sources resolve in
    # empty directories, never in this checkout (which a source without a config would be cloned from).
    root = tmp_path / "sources"
    _git_repository(root / "agent", MINIMAL_CONFIG)
    (root / "escape").symlink_to("/")
    for name in ("cwd", "home"):
        (tmp_path / name).mkdir()
    monkeypatch.chdir(tmp_path / "cwd")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    # mine.target has a queued job, so every change of it would stop at target_busy: an idle target of the project.
    idle = EvolutionTarget.objects.create(project=mine.project, name="idle target", source="/nonexistent/agent",
                                          config=MINIMAL_CONFIG)
    path_parameters = {"target_id": idle.pk} if "{target_id}" in path else {}
    before = CASES["target operations"]

    @given(case=operation.as_strategy(), body=TARGET_BODIES[method])
    @settings(max_examples=TARGET_EXAMPLES, deadline=None, derandomize=True, database=None,
              suppress_health_check=list(HealthCheck))
    def check(case, body):
        CASES["target operations"] += 1
        generated = case.body if isinstance(case.body, dict) else {}
        if isinstance(body.get("source"), str):
            body = {**body, "source": body["source"].replace(ROOT, str(root))}
        case.body = {**generated, **body}
        case.media_type = "application/json"
        case.path_parameters = path_parameters
        _call_and_check(case, headers)

    for number, body in reversed(list(enumerate(TARGET_EXAMPLE_BODIES))):  # the outermost @example runs first
        check = example(case=operation.Case(body={"name": f"example {number}"}, media_type="application/json"),
                        body=body)(check)
    with override_settings(CLEAR_EVOLUTION_SOURCE_ROOTS=[str(root)]):
        check()
    request.node.user_properties.append(("generated_cases", CASES["target operations"] - before))
    assert CASES["target operations"] - before >= TARGET_EXAMPLES + len(TARGET_EXAMPLE_BODIES)


# --- evolution jobs, the issue tracker, scores: inputs bound for another server, answers from one, huge numbers ---

SIDE_EXAMPLES = 60  # per operation below, besides the explicit @examples
ECHO = "ECHO-c41d2e-from-the-tracker"  # in every reply of the fake tracker: no API answer may repeat it
# The model hosts allowed here answer nothing (a closed port, a name that never resolves): a preflight that gets that
# far fails at once, and no generated job reaches a model. URLs that parsers read differently (user info, a
# backslash, odd ports) aim one host at the check and another at the call.
MODEL_HOSTS = ["127.0.0.1:9", "model.invalid"]
MODEL_URLS = st.one_of(
    st.builds(lambda scheme, userinfo, host, path: f"{scheme}{userinfo}{host}/{path}",
              st.sampled_from(["http://", "https://", "HTTPS://", "ftp://", "//", ""]),
              st.sampled_from(["", "user@", "user:pw@", "127.0.0.1:9\\@", "x\\@", "@", "%40@"]),
              st.sampled_from(["127.0.0.1:9", "127.0.0.1:9\\@model.invalid", "model.invalid\\@127.0.0.1:9",
                               "127.0.0.1:9\\.invalid", "[::1]:9", "[::ffff:127.0.0.1]:9", "127.0.0.1:99999",
                               "127.0.0.1:9a", "127.0.0.1:", "127.0.0.1:-9", "0x7f.1:9", "2130706433:9",
                               "model.invalid"]),
              URL_PATH),
    URLS, st.text(max_size=40), JSON_VALUES,
)


@st.composite
def job_bodies(draw):
    """A litellm or external job whose model URL is drawn; the target is busy, so none is ever started."""
    backend = draw(st.sampled_from(["litellm", "external"]))
    url = draw(MODEL_URLS)
    if backend == "litellm":
        config = {"model": draw(st.sampled_from(["openai/gpt-4o-mini", "openai/x", "x"])), "api_base": url}
    else:
        config = {"template": draw(st.sampled_from(["custom", "claude", "codex", "aider", "mini", "nope"])),
                  "command": "no-such-agent-cli", "model_url": url}
    key = draw(st.sampled_from([None, "OPENAI_API_KEY", "SECRET_KEY", ""]))
    if key is not None:
        config["api_key_env"] = key
    return {"backend": backend, "backend_config": config, "confirm": draw(st.booleans()),
            "depth": draw(st.sampled_from(["standard", "shallow"]))}


# Sent every run: on the parent of issue 38's fix the first was a 500 (http.client.InvalidURL from the preflight).
JOB_EXAMPLE_BODIES = [
    {"backend": "litellm", "confirm": True,
     "backend_config": {"model": "openai/x", "api_base": "http://127.0.0.1:9\\@model.invalid/v1"}},
    {"backend": "litellm", "confirm": True,
     "backend_config": {"model": "openai/x", "api_base": "http://model.invalid\\@127.0.0.1:9/v1"}},
    {"backend": "external", "confirm": True,
     "backend_config": {"template": "custom", "command": "no-such-agent-cli",
                        "model_url": "https://127.0.0.1:9@model.invalid"}},
]

TRACKER_BODIES = st.one_of(
    st.just({"message": f"<b>{ECHO}</b>", "errors": [{"message": ECHO, "code": ECHO}, ECHO],
             "documentation_url": f"https://{ECHO}.invalid"}),
    st.just([{"number": 1, "title": ECHO, "body": "<!-- clear-fingerprint: 0123456789abcdef -->",
              "html_url": f"https://{ECHO}.invalid/1", "state": ECHO}]),
    st.just({"number": 10 ** 30, "html_url": ECHO}),
    st.just(f"<html>{ECHO}</html>".encode()),
    st.just(b'{"number": 1e999, "message": "' + ECHO.encode() + b'"}'),
    st.builds(lambda value: {"number": value, "html_url": f"https://{ECHO}.invalid/", "message": ECHO}, JSON_VALUES),
)
TRACKER_HEADERS = st.sampled_from([{}, {"X-RateLimit-Remaining": "0"}, {"Retry-After": ECHO},
                                   {"Location": f"https://{ECHO}.invalid/"},
                                   {"Link": f'<https://{ECHO}.invalid/next>; rel="next"'}])
TRACKER_REPLIES = st.fixed_dictionaries({
    "method": st.sampled_from([None, "GET", "POST", "PATCH"]),
    "status": st.sampled_from([200, 201, 204, 301, 400, 401, 403, 404, 410, 418, 422, 429, 500, 502, 503]),
    "body": TRACKER_BODIES, "headers": TRACKER_HEADERS,
    "html_base": st.sampled_from([None, f"https://{ECHO}.invalid", "http://127.0.0.1", "javascript:alert(1)//",
                                  "https://127.0.0.1@elsewhere.invalid", "https://elsewhere.invalid\\@127.0.0.1"]),
})


def _no_echo(response) -> None:
    assert ECHO not in response.text, response.text[:1000]


def test_evolution_jobs_with_drawn_model_urls_keep_to_the_schema(served_schema, mine, request):
    operation = served_schema["/api/v1/evolution/jobs/"]["POST"]
    headers = {"Authorization": f"Bearer {mine.key.secret}"}
    before = CASES["side operations"]

    @given(case=operation.as_strategy(), body=job_bodies())
    @settings(max_examples=SIDE_EXAMPLES, deadline=None, derandomize=True, database=None,
              suppress_health_check=list(HealthCheck))
    def check(case, body):
        CASES["side operations"] += 1
        generated = case.body if isinstance(case.body, dict) else {}
        generated.pop("ticket", None)
        # mine.target has a queued job: a config that passes every check still starts nothing (409 target_busy).
        case.body = {**generated, **body, "target": mine.target.id, "insight": mine.insight.id}
        case.media_type = "application/json"
        _call_and_check(case, headers)

    for body in reversed(JOB_EXAMPLE_BODIES):
        check = example(case=operation.Case(body={}, media_type="application/json"), body=body)(check)
    with override_settings(CLEAR_EVOLUTION_MODEL_HOSTS=MODEL_HOSTS):
        check()
    request.node.user_properties.append(("generated_cases", CASES["side operations"] - before))


def test_the_tracker_and_its_push_keep_to_the_schema_and_echo_nothing(served_schema, mine, request):
    headers = {"Authorization": f"Bearer {mine.key.secret}"}
    put = served_schema["/api/v1/tickets/tracker/"]["PUT"]
    push = served_schema["/api/v1/tickets/push/"]["POST"]
    reads = [served_schema["/api/v1/tickets/tracker/"]["GET"].Case(),
             served_schema["/api/v1/tickets/"]["GET"].Case(query={"status": "all"}),
             served_schema["/api/v1/tickets/{ticket_id}/"]["GET"].Case(path_parameters={"ticket_id": mine.ticket.id})]
    before = CASES["side operations"]
    fake = FakeGitHub(repository="acme/agent").start()
    try:
        @given(case=put.as_strategy(), reply=TRACKER_REPLIES)
        @settings(max_examples=SIDE_EXAMPLES, deadline=None, derandomize=True, database=None,
                  suppress_health_check=list(HealthCheck))
        def check(case, reply):
            CASES["side operations"] += 1
            fake.issues.clear()
            fake.replies = {reply["method"]: (reply["status"], reply["body"], reply["headers"])} \
                if reply["method"] else {}
            fake.html_base = reply["html_base"]
            Ticket.objects.filter(pk=mine.ticket.pk).update(external_number=None, external_url="", pushed_hash="",
                                                             push_error="")
            generated = case.body if isinstance(case.body, dict) else {}
            case.body = {**generated, "base_url": fake.url, "repository": fake.repository, "token": fake.token,
                         "enabled": True}
            case.media_type = "application/json"
            _no_echo(_call_and_check(case, headers))
            _no_echo(_call_and_check(push.Case(), headers))  # eager Celery: the push runs inside the request
            for read in reads:
                _no_echo(_call_and_check(read, headers))
            external_url = Ticket.objects.get(pk=mine.ticket.pk).external_url
            assert external_url == "" or external_url.startswith(f"https://127.0.0.1:{fake.server.server_address[1]}/")

        # The fake tracker is on http://127.0.0.1, which the operator must allow (clear/outbound/policy.py).
        with override_settings(CLEAR_TRACKER_ALLOW_PRIVATE=True, CLEAR_TRACKER_ALLOW_HTTP=True):
            check()
    finally:
        fake.stop()
    request.node.user_properties.append(("generated_cases", CASES["side operations"] - before))


SCORE_VALUES = st.one_of(NUMBERS, st.integers(300, 4000).map(lambda digits: -(10 ** digits)), JSON_VALUES,
                         st.sampled_from([True, "NaN", "1e999", 1e308, -0.0, "", "x" * HUGE]))
SCORES = st.fixed_dictionaries(
    {"traceId": st.one_of(st.just("scored-trace"), st.text(max_size=40)), "name": st.text(max_size=30),
     "value": SCORE_VALUES},
    optional={"dataType": st.sampled_from(["NUMERIC", "CATEGORICAL", "BOOLEAN", "TEXT", "CORRECTION", "nope"]),
              "id": st.text(max_size=40), "observationId": st.one_of(st.none(), st.text(max_size=20)),
              "comment": st.one_of(st.none(), st.text(max_size=30))})


def test_scores_with_drawn_values_keep_to_the_schema(served_schema, mine, request):
    """/api/public/scores is described by traces/schema.py, outside /api/v1/: its values reach a float column."""
    operation = served_schema["/api/public/scores"]["POST"]
    headers = {"Authorization": f"Bearer {mine.key.secret}"}
    before = CASES["side operations"]

    @given(case=operation.as_strategy(), body=st.one_of(SCORES, st.lists(SCORES, min_size=1, max_size=3)))
    @settings(max_examples=SIDE_EXAMPLES, deadline=None, derandomize=True, database=None,
              suppress_health_check=list(HealthCheck))
    def check(case, body):
        CASES["side operations"] += 1
        case.body = body
        case.media_type = "application/json"
        _call_and_check(case, headers)

    # On the parent of issue 38's fix a value of 400 digits was a 500 (OverflowError in float()).
    big = {"traceId": "scored-trace", "name": "big", "value": 10 ** 400}
    for body in (big, [big, {**big, "value": 1}]):
        check = example(case=operation.Case(body={}, media_type="application/json"), body=body)(check)
    check()
    request.node.user_properties.append(("generated_cases", CASES["side operations"] - before))
