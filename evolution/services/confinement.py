"""What a project's API key or a logged-in user may register, as opposed to the operator at the shell (issue 22).

The worker reads a target's source with its own rights and keeps every project's mirror side by side, so a source
given through the API or the web UI is a remote git URL (https://, ssh://, user@host:path) or a directory under one
the operator opened for it (CLEAR_EVOLUTION_SOURCE_ROOTS), never Clear's own files nor another project's repository.
What a target runs or reads is the operator's (issue 37): its commands and sandbox levels, its `hot_swap` section (run
on the host) and its `scripted_fixtures` (files on the host), like the script files a scripted job reads. Through the
API and the web UI they come from what is stored, or, for a new target, from the repository's own evolution.json,
whose commands run only in the sandbox (its hot_swap and scripted_fixtures are refused). `manage.py
evolution_target` and `manage.py evolution_job` stay unrestricted: whoever runs them already has the server.

A refusal names the field and what to change; it never echoes a resolved path, a git command or a temp directory,
which would tell a client about the server's disk.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from urllib.parse import urlsplit

from django.conf import settings

from evolution.errors import EvolutionConfigInvalid, GitError

MAX_SOURCE_BYTES = 4096  # PATH_MAX: past it the OS answers ENAMETOOLONG
MAX_COMPONENT_BYTES = 255  # NAME_MAX
OPERATOR_FIELDS = ("install_command", "test_command", "trial_command", "grader_command", "suite_command",
                   "health_command", "sandbox_levels", "hot_swap", "scripted_fixtures")
HOST_FIELDS = ("hot_swap", "scripted_fixtures")  # they act outside the sandbox: never from a repository either
REMOTE_SCHEMES = ("https", "ssh")
OPERATOR_COMMAND = "manage.py evolution_target add/update"
# git's scp-like syntax: no slash before the colon (git would take it for a local path), a host that cannot be read as
# an ssh option.
SCP_RE = re.compile(r"^[A-Za-z0-9._+-]+@[A-Za-z0-9][A-Za-z0-9.-]*:\S")
SCHEME_RE = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*:")  # another URL scheme, or git's <transport>::<address>
_GIT_REASONS = (
    (("address not allowed",), "its address is not allowed: Clear reaches public git hosts over https:// or ssh:// "
                               "(the operator can widen this: CLEAR_GIT_ALLOW_PRIVATE, CLEAR_GIT_ALLOW_HTTP)"),
    (("is not a commit",), "the branch, tag or commit to read does not exist"),
    (("returned error: 30",), "the server answered with a redirect, which Clear does not follow"),
    (("did not finish within",), "it took too long"),
    (("could not resolve host", "name or service not known", "temporary failure in name resolution"),
     "the host name does not resolve"),
    (("authentication failed", "could not read username", "could not read password", "terminal prompts disabled",
      "permission denied", "host key verification failed"), "access was refused or needs credentials"),
    (("not found", "does not appear to be a git repository", "not a git repository", "does not exist",
      "no such file"), "repository not found"),
    (("connection refused", "timed out", "network is unreachable", "failed to connect", "unable to access",
      "could not read from remote", "ssl"), "the server could not connect to it"),
    (("git is not installed",), "git is not available on the server"),
)


def _refuse(field: str, problem: str) -> EvolutionConfigInvalid:
    return EvolutionConfigInvalid(f"{field}: {problem}", extra={"fields": {field: problem}})


def source_shape_check(*, value: str, field: str = "source") -> str:
    """The value stripped; refused when no filesystem call could take it (too long, NUL, control characters, not
    encodable) instead of failing later with an OSError."""
    value = value.strip()
    try:
        encoded = value.encode("utf-8")
    except UnicodeEncodeError:
        raise _refuse(field, "is not valid text (it holds an unpaired surrogate)") from None
    if len(encoded) > MAX_SOURCE_BYTES:
        raise _refuse(field, f"is longer than {MAX_SOURCE_BYTES} bytes")
    if any(ord(ch) < 32 or ord(ch) == 127 for ch in value):
        raise _refuse(field, "holds a NUL byte or another control character")
    if any(len(part) > MAX_COMPONENT_BYTES for part in encoded.split(b"/")):
        raise _refuse(field, f"has a path component longer than {MAX_COMPONENT_BYTES} bytes")
    return value


def _within(path: str, directory: str) -> bool:
    return path == directory or path.startswith(directory.rstrip("/") + "/")


def _realpath(path: str) -> str:
    try:
        return os.path.realpath(path)
    except (OSError, ValueError):
        return os.path.normpath(path)


def clear_dirs() -> list[str]:
    """Clear's own directories: its checkout, its data, the mirrors and worktrees of every project, the releases."""
    evolution = Path(settings.CLEAR_EVOLUTION_DIR)
    dirs = [settings.BASE_DIR, settings.VAR_DIR, getattr(settings, "SHARED_DIR", None), evolution,
            settings.CLEAR_EVOLUTION_RELEASES_DIR or evolution / "releases"]
    return [_realpath(str(d)) for d in dirs if d]


def _remote_check(source: str, field: str) -> str:
    if not SCP_RE.match(source):
        scheme = source.split(":", 1)[0].lower()
        if scheme not in (*REMOTE_SCHEMES, "http") or not source[len(scheme):].startswith("://"):
            raise _refuse(field, f"this kind of URL ({scheme}:) is not accepted; give an https:// or ssh:// git URL, "
                                 "or user@host:path")
        try:
            host = urlsplit(source).hostname or ""
        except ValueError:
            host = ""
        if not host or host.startswith("-"):
            raise _refuse(field, f"the {scheme}:// URL names no host")
    # The outbound policy (clear/outbound): no loopback, private or metadata address in any spelling, checked again
    # and pinned at every clone, fetch and push.
    from clear.outbound import OutboundInvalidError, outbound_url_check

    try:
        outbound_url_check(url=source, purpose="git", field=field)
    except OutboundInvalidError as exc:
        problem = (exc.extra.get("fields") or {}).get(field) or [exc.message]
        raise _refuse(field, problem[0] if isinstance(problem, list) else str(problem)) from None
    return source


def _taken_by_another_project(real: str, *, project) -> bool:
    from evolution.models import EvolutionTarget

    rows = EvolutionTarget.objects.exclude(project=project).values_list("source", "push_url")
    for paths in rows:
        for other in paths:
            if other.startswith("/"):
                other = _realpath(other)
                if _within(real, other) or _within(other, real):
                    return True
    return False


def _local_check(source: str, *, project, field: str) -> str:
    if not source.startswith("/"):
        raise _refuse(field, "give an https:// or ssh:// git URL, user@host:path, or an absolute path (a relative "
                             "path is not accepted)")
    roots = [_realpath(str(root)) for root in settings.CLEAR_EVOLUTION_SOURCE_ROOTS if str(root).strip()]
    if not roots:
        raise _refuse(field, "local paths are not accepted here: the operator has opened no directory for them "
                             "(setting CLEAR_EVOLUTION_SOURCE_ROOTS is empty). Give a git URL (https://, ssh:// or "
                             "user@host:path), or ask the operator to run manage.py evolution_target add")
    real = _realpath(source)
    if not any(_within(real, root) for root in roots):
        raise _refuse(field, "this path is not under a directory the operator allows for sources (setting "
                             "CLEAR_EVOLUTION_SOURCE_ROOTS)")
    if any(_within(real, own) or _within(own, real) for own in clear_dirs()):
        raise _refuse(field, "this path is, holds or is inside Clear's own files; name the agent's own repository")
    if _taken_by_another_project(real, project=project):
        raise _refuse(field, "this path is, holds or is inside the repository of another project's target")
    if not os.path.isdir(real):
        raise _refuse(field, "there is no directory at this path")
    return real


def source_confined(*, source: str, project, field: str = "source") -> str:
    """A source (or push URL) given through the API or the web UI, as it is stored: a remote git URL as given, a
    local path resolved (symlinks followed) once it is known to be under a source root."""
    source = source_shape_check(value=source, field=field)
    if not source:
        raise _refuse(field, "required: a git URL (https://, ssh:// or user@host:path)")
    if source.startswith("/"):
        return _local_check(source, project=project, field=field)
    if SCP_RE.match(source) or SCHEME_RE.match(source):
        return _remote_check(source, field)
    return _local_check(source, project=project, field=field)


def repository_config_confine(*, config: dict) -> dict:
    """A repository's own evolution.json, read for an API or web user: its commands and sandbox levels are taken (they
    run only in the sandbox, at the levels the server allows), its hot_swap and scripted_fixtures refused."""
    refused = {f"config.{key}": "the repository's evolution.json sets it; only the operator can set this: "
                                f"{OPERATOR_COMMAND} --config FILE. Leave it out"
               for key in HOST_FIELDS if config.get(key) is not None}
    if refused:
        raise _refused_all(refused)
    return {key: value for key, value in config.items() if key not in HOST_FIELDS}


def operator_fields_keep(*, config: dict, stored: dict | None, from_repository: bool = False) -> dict:
    """`config` with the operator's fields (OPERATOR_FIELDS) of `stored` in place of its own: the target's saved
    config, or for a new target the repository's evolution.json (`from_repository`). A field the client leaves out
    (or sends as null) is kept as stored; one it sends must be what is stored (the edit form sends the whole config
    back); anything else is refused, every such field named."""
    stored = stored or {}
    merged = {key: value for key, value in config.items() if key not in OPERATOR_FIELDS}
    merged.update({key: stored[key] for key in OPERATOR_FIELDS if key in stored})
    refused = {}
    for key in OPERATOR_FIELDS:
        if config.get(key) is None or _same_value(key, config[key], stored.get(key)):
            continue
        if from_repository and key not in HOST_FIELDS:
            problem = (f"it comes from the repository's evolution.json; only the operator can set another value: "
                       f"{OPERATOR_COMMAND} --config FILE. Leave it out")
        else:
            problem = f"only the operator can set this: {OPERATOR_COMMAND} --config FILE. Leave it out"
        refused[f"config.{key}"] = problem
    if refused:
        # Every bad field at once: the rest of the config is checked too, with the stored values in place.
        from evolution.config import target_config_validate

        try:
            target_config_validate(merged)
        except EvolutionConfigInvalid as exc:
            refused.update(exc.extra.get("fields") or {})
        raise _refused_all(refused)
    return merged


def config_requested_check(*, config) -> None:
    """What can be said of a new target's config before a worker reads its repository, so that it is a 400 at once:
    a JSON object (or none), without hot_swap or scripted_fixtures, its own fields valid. Its commands and sandbox
    levels are held against the repository's evolution.json when that is read."""
    from evolution.config import target_config_validate

    if config is None:
        return
    if not isinstance(config, dict):
        target_config_validate(config)  # says what it must be
        return
    refused = {f"config.{key}": f"only the operator can set this: {OPERATOR_COMMAND} --config FILE. Leave it out"
               for key in HOST_FIELDS if config.get(key) is not None}
    # The repository's commands are not known yet: stand-ins that validate, so only the client's own fields are judged.
    stand_ins = {key: _PROBE_CONFIG[key] for key in ("trial_command", "grader_command")}
    own = {key: value for key, value in config.items() if key not in OPERATOR_FIELDS}
    try:
        target_config_validate({**stand_ins, **own})
    except EvolutionConfigInvalid as exc:
        refused.update(exc.extra.get("fields") or {})
    if refused:
        raise _refused_all(refused)


def _refused_all(fields: dict[str, str]) -> EvolutionConfigInvalid:
    return EvolutionConfigInvalid("; ".join(f"{field}: {problem}" for field, problem in fields.items()),
                                  extra={"fields": fields})


_UNLIKE = object()  # what a value that does not validate stands for: equal to nothing
# The least config that validates: each operator field is checked on its own against it.
_PROBE_CONFIG = {"editable_paths": ["**"], "trial_command": "{task_id} {out}", "grader_command": "{out}"}


def _same_value(key: str, sent, stored) -> bool:
    """Whether `sent` means what `stored` does: the same section spelled with or without its defaults, or sandbox
    levels that come to the same once the levels below the server's minimum are dropped (a stored list was confined
    that way when the target was registered)."""
    if sent == stored:
        return True
    sent, stored = _normalized(key, sent), _normalized(key, stored)
    if key == "sandbox_levels" and sent is not _UNLIKE and stored is not _UNLIKE:
        from evolution.sandbox import sandbox_levels_allowed

        sent, stored = sandbox_levels_allowed(levels=sent), sandbox_levels_allowed(levels=stored)
    return sent is not _UNLIKE and sent == stored


def _normalized(key: str, value):
    from evolution.config import target_config_validate

    if value is None and key in _PROBE_CONFIG:
        return None  # a required field left out has no default
    probe = dict(_PROBE_CONFIG) if value is None else {**_PROBE_CONFIG, key: value}
    try:
        return target_config_validate(probe).model_dump(exclude_none=True).get(key)
    except EvolutionConfigInvalid:
        return _UNLIKE


def git_error_reason(exc: GitError) -> str:
    """What went wrong in a few words, without the command, the paths or git's own output."""
    text = exc.message.lower()
    for needles, reason in _GIT_REASONS:
        if any(needle in text for needle in needles):
            return reason
    return "git could not read it"


def script_path_check(*, target, backend_config: dict) -> None:
    """A scripted job started through the API or the Evolve form reads one of the scripts the operator listed for
    the target (its config's scripted_fixtures), or the inline `script`."""
    if "script_path" not in backend_config:
        return
    value = backend_config["script_path"]
    fixtures = (target.config or {}).get("scripted_fixtures") or []
    if isinstance(value, str) and source_shape_ok(value) and _script_key(value) in {_script_key(f) for f in fixtures}:
        return
    raise EvolutionConfigInvalid(
        "backend_config.script_path: not one of the scripts the operator listed for this target (its config's "
        "scripted_fixtures); choose one of those, or give the script inline as backend_config.script",
        extra={"fields": {"backend_config.script_path": "not one of the target's scripted_fixtures"}})


def source_shape_ok(value: str) -> bool:
    try:
        source_shape_check(value=value)
    except EvolutionConfigInvalid:
        return False
    return True


def _script_key(path: str) -> str:
    # As the scripted backend reads it (relative to Clear's root), compared as text: nothing on disk is looked at.
    return os.path.normpath(os.path.join(str(settings.BASE_DIR), os.path.expanduser(path)))
