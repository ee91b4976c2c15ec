"""The backend registry, the scripted backend (lookup, edits, sleeps, cancel, exit codes, violations, crashes,
recorded prompts) and the role output schemas."""

import json
import threading
from dataclasses import replace
from pathlib import Path

import pytest

from evolution.backends import (
    Access,
    BackendCrashed,
    BackendError,
    CodingBackend,
    Role,
    RoleRequest,
    backend_get,
)
from evolution.backends.scripted import VIOLATION_FILE, ScriptedBackend
from evolution.backends.schemas import (
    CODE_REVIEW_SCHEMA,
    DIAGNOSIS_SCHEMA,
    IMPLEMENTER_SCHEMA,
    PLAN_REVIEW_SCHEMA,
    PLAN_SCHEMA,
    ROLE_SCHEMAS,
    output_validate,
)

REPO_ROOT = Path(__file__).resolve().parents[2]
SUPPORT_DESK_SCRIPTS = REPO_ROOT / "examples" / "support_desk" / "evolution"


@pytest.fixture
def workdir(tmp_path) -> Path:
    path = tmp_path / "wt"
    (path / "pkg").mkdir(parents=True)
    (path / "pkg" / "router.py").write_text("def route(x):\n    return 'billing'\n")
    return path


def request_for(workdir: Path, log_dir: Path, *, role: Role = Role.IMPLEMENTER, iteration: int = 1, round: int = 0,
                access: Access = Access.READ_WRITE, timeout_s: float = 30.0, user_input: str = "fix it",
                ) -> RoleRequest:
    return RoleRequest(role=role, iteration=iteration, round=round, system_prompt=f"You are the {role}.",
                       user_input=user_input, workdir=workdir, access=access, output_schema=ROLE_SCHEMAS[role],
                       timeout_s=timeout_s, log_dir=log_dir)


def scripted(script: dict) -> ScriptedBackend:
    backend = backend_get(name="scripted", config={"script": script})
    assert isinstance(backend, ScriptedBackend)
    return backend


def test_registry_knows_the_backends_and_refuses_unknown_names():
    assert isinstance(backend_get(name="scripted", config={"script": {"entries": []}}), CodingBackend)
    with pytest.raises(BackendError, match="Unknown coding backend 'gpt-magic'; choose one of .*scripted"):
        backend_get(name="gpt-magic", config={})
    with pytest.raises(BackendError, match="must be an object"):
        backend_get(name="scripted", config=["not", "a", "mapping"])


def test_lookup_order_exact_then_any_round_then_any_iteration_then_defaults(workdir, tmp_path):
    backend = scripted({
        "entries": [
            {"role": "planner", "iteration": 1, "round": 2, "output": {"pick": "exact"}},
            {"role": "planner", "iteration": 1, "round": "*", "output": {"pick": "iteration-any-round"}},
            {"role": "planner", "iteration": "*", "round": 3, "output": {"pick": "any-iteration-round-3"}},
            {"role": "planner", "iteration": "*", "output": {"pick": "any-iteration"}},
            {"role": "locator", "iteration": 2, "round": 0, "output": {"pick": "locator-2"}},
        ],
        "defaults": {"locator": {"output": {"pick": "locator-default"}}},
    })

    def pick(role: Role, iteration: int, round: int):
        result = backend.run_role(request_for(workdir, tmp_path / "logs", role=role, iteration=iteration,
                                              round=round, access=Access.READ_ONLY))
        return result.output and result.output["pick"], result

    assert pick(Role.PLANNER, 1, 2)[0] == "exact"
    assert pick(Role.PLANNER, 1, 5)[0] == "iteration-any-round"
    assert pick(Role.PLANNER, 4, 3)[0] == "any-iteration-round-3"
    assert pick(Role.PLANNER, 4, 0)[0] == "any-iteration"
    assert pick(Role.LOCATOR, 2, 0)[0] == "locator-2"
    assert pick(Role.LOCATOR, 1, 0)[0] == "locator-default"

    missing, result = pick(Role.CODE_REVIEWER, 1, 0)
    assert missing is None
    assert result.exit_code == 1
    assert "no scripted entry" in result.error
    assert result.output is None


def test_edits_replace_write_and_patch_apply_for_read_write_roles(workdir, tmp_path):
    patch = (
        "--- a/pkg/router.py\n+++ b/pkg/router.py\n@@ -1,2 +1,2 @@\n def route(x):\n-    return 'refunds'\n"
        "+    return 'orders'\n"
    )
    backend = scripted({"entries": [{
        "role": "implementer", "iteration": 1, "round": 0,
        "output": {"status": "DONE", "summary": "routed"},
        "edits": [
            {"path": "pkg/router.py", "replace": {"old": "'billing'", "new": "'refunds'"}},
            {"path": "pkg/sub/new.py", "write": "NEW = 1\n"},
            {"patch": patch},
        ],
    }]})
    result = backend.run_role(request_for(workdir, tmp_path / "logs"))

    assert result.exit_code == 0, result.error
    assert result.output == {"status": "DONE", "summary": "routed"}
    assert json.loads(result.raw_output) == result.output
    assert (workdir / "pkg" / "router.py").read_text() == "def route(x):\n    return 'orders'\n"
    assert (workdir / "pkg" / "sub" / "new.py").read_text() == "NEW = 1\n"
    assert output_validate(output=result.output, schema=IMPLEMENTER_SCHEMA) == []


def test_edits_are_not_applied_for_read_only_roles(workdir, tmp_path):
    backend = scripted({"entries": [{"role": "implementer", "output": {"status": "DONE", "summary": "x"},
                                     "edits": [{"path": "pkg/new.py", "write": "x"}]}]})
    result = backend.run_role(request_for(workdir, tmp_path / "logs", access=Access.READ_ONLY))
    assert result.exit_code == 0
    assert not (workdir / "pkg" / "new.py").exists()


@pytest.mark.parametrize(("edit", "message"), [
    ({"path": "pkg/router.py", "replace": {"old": "nowhere", "new": "x"}}, "occurs 0 times in pkg/router.py"),
    ({"path": "pkg/missing.py", "replace": {"old": "a", "new": "b"}}, "cannot read pkg/missing.py"),
    ({"patch": "--- a/pkg/router.py\n+++ b/pkg/router.py\n@@ -1 +1 @@\n-nope\n+x\n"}, "the patch does not apply"),
])
def test_an_edit_that_does_not_apply_fails_the_role(workdir, tmp_path, edit, message):
    backend = scripted({"entries": [{"role": "implementer", "output": {"status": "DONE", "summary": "x"},
                                     "edits": [edit]}]})
    result = backend.run_role(request_for(workdir, tmp_path / "logs"))
    assert result.exit_code == 1
    assert message in result.error


def test_a_replace_that_matches_twice_is_refused(workdir, tmp_path):
    (workdir / "pkg" / "twice.py").write_text("a = 1\na = 1\n")
    backend = scripted({"entries": [{"role": "implementer", "output": {"status": "DONE", "summary": "x"},
                                     "edits": [{"path": "pkg/twice.py", "replace": {"old": "a = 1", "new": "b"}}]}]})
    result = backend.run_role(request_for(workdir, tmp_path / "logs"))
    assert "occurs 2 times" in result.error
    assert (workdir / "pkg" / "twice.py").read_text() == "a = 1\na = 1\n"


def test_sleep_past_the_timeout_returns_timed_out_without_edits(workdir, tmp_path):
    backend = scripted({"entries": [{"role": "implementer", "sleep_s": 30, "output": {"status": "DONE"},
                                     "edits": [{"path": "late.py", "write": "x"}]}]})
    result = backend.run_role(request_for(workdir, tmp_path / "logs", timeout_s=0.3))
    assert result.timed_out
    assert result.exit_code != 0
    assert result.output is None
    assert not (workdir / "late.py").exists()


def test_a_short_sleep_within_the_timeout_completes(workdir, tmp_path):
    backend = scripted({"entries": [{"role": "implementer", "sleep_s": 0.1,
                                     "output": {"status": "DONE", "summary": "slept"}}]})
    result = backend.run_role(request_for(workdir, tmp_path / "logs", timeout_s=30))
    assert not result.timed_out
    assert result.output["summary"] == "slept"


def test_cancel_stops_a_sleeping_role(workdir, tmp_path):
    backend = scripted({"entries": [{"role": "implementer", "sleep_s": 60, "output": {"status": "DONE"}}]})
    results = []
    thread = threading.Thread(target=lambda: results.append(backend.run_role(request_for(workdir, tmp_path / "l"))))
    thread.start()
    # Cancel only once the role is in its sleep: its request is recorded before it sleeps.
    prompts = tmp_path / "l" / "prompts.jsonl"
    while not prompts.exists():
        thread.join(0.02)
    backend.cancel()
    thread.join(30)
    assert not thread.is_alive()
    (result,) = results
    assert result.error == "cancelled"
    assert not result.timed_out
    assert result.exit_code != 0
    assert result.output is None


def test_exit_code_is_returned_with_the_output(workdir, tmp_path):
    backend = scripted({"entries": [{"role": "implementer", "exit_code": 3,
                                     "output": {"status": "BLOCKED", "summary": "stuck", "blocker": "no access"}}]})
    result = backend.run_role(request_for(workdir, tmp_path / "logs"))
    assert result.exit_code == 3
    assert result.output["status"] == "BLOCKED"
    assert "exit code 3" in result.error


def test_violate_readonly_writes_into_a_read_only_workdir(workdir, tmp_path):
    backend = scripted({"entries": [{"role": "locator", "violate_readonly": True,
                                     "output": {"clusters": []}}]})
    result = backend.run_role(request_for(workdir, tmp_path / "logs", role=Role.LOCATOR, access=Access.READ_ONLY))
    assert result.exit_code == 0
    assert (workdir / VIOLATION_FILE).is_file()


def test_crash_raises_backend_crashed_after_recording_the_prompt(workdir, tmp_path):
    backend = scripted({"entries": [{"role": "planner", "crash": True}]})
    with pytest.raises(BackendCrashed, match="crashed on purpose"):
        backend.run_role(request_for(workdir, tmp_path / "logs", role=Role.PLANNER, access=Access.READ_ONLY))
    (line,) = (tmp_path / "logs" / "prompts.jsonl").read_text().splitlines()
    assert json.loads(line)["role"] == "planner"


def test_raw_output_that_is_not_json_gives_no_output(workdir, tmp_path):
    backend = scripted({"entries": [
        {"role": "planner", "round": 0, "raw_output": "Here is my plan: ```oops"},
        {"role": "planner", "round": 1, "raw_output": '{"changes": []}'},
    ]})
    malformed = backend.run_role(request_for(workdir, tmp_path / "logs", role=Role.PLANNER, round=0))
    assert malformed.output is None
    assert malformed.raw_output == "Here is my plan: ```oops"
    parsed = backend.run_role(request_for(workdir, tmp_path / "logs", role=Role.PLANNER, round=1))
    assert parsed.output == {"changes": []}
    assert output_validate(output=parsed.output, schema=PLAN_SCHEMA) == [
        "output: 'per_task_impact' is a required property",
        "output.changes: [] should be non-empty",
    ]


def test_every_request_is_recorded_with_its_prompts_and_a_transcript(workdir, tmp_path):
    backend = scripted({"entries": [{"role": "planner", "output": {"changes": []}}]})
    logs = tmp_path / "logs"
    first = backend.run_role(request_for(workdir, logs, role=Role.PLANNER, round=0, user_input="plan it"))
    backend.run_role(request_for(workdir, logs, role=Role.PLANNER, round=1,
                                 user_input="plan it\n\nReviewer feedback: cover task t2"))
    backend.run_role(request_for(workdir, logs, role=Role.CODE_REVIEWER, round=0))  # no entry: still recorded

    lines = [json.loads(line) for line in (logs / "prompts.jsonl").read_text().splitlines()]
    assert [(line["role"], line["iteration"], line["round"]) for line in lines] == [
        ("planner", 1, 0), ("planner", 1, 1), ("code_reviewer", 1, 0),
    ]
    assert "Reviewer feedback: cover task t2" in lines[1]["user_input"]
    assert lines[0]["system_prompt"] == "You are the planner."

    assert first.transcript_path.parent == logs
    transcript = json.loads(first.transcript_path.read_text())
    assert transcript["user_input"] == "plan it"
    assert transcript["result"]["output"] == {"changes": []}
    assert first.model == "scripted"


def test_script_from_a_file_and_its_errors(tmp_path):
    path = tmp_path / "script.json"
    path.write_text(json.dumps({"entries": [{"role": "locator", "output": {"clusters": []}}]}))
    assert backend_get(name="scripted", config={"script_path": str(path)}).preflight().ok

    with pytest.raises(BackendError, match="needs 'script'"):
        backend_get(name="scripted", config={})
    with pytest.raises(BackendError, match="cannot read script_path"):
        backend_get(name="scripted", config={"script_path": str(tmp_path / "missing.json")})
    path.write_text("{not json")
    with pytest.raises(BackendError, match="is not valid JSON"):
        backend_get(name="scripted", config={"script_path": str(path)})


def test_script_path_relative_to_the_repository_root():
    backend = backend_get(name="scripted",
                          config={"script_path": "examples/support_desk/evolution/mediator_race_fix.json"})
    assert backend.entry_find(role="implementer", iteration=1, round=0)["output"]["status"] == "DONE"


@pytest.mark.parametrize(("script", "message"), [
    ({"entries": [{"role": "wizard"}]}, "entries\\[0\\] needs a role, one of locator"),
    ({"entries": [{"role": "planner", "iteration": "first"}]}, "entries\\[0\\].iteration must be an integer"),
    ({"entries": [{"role": "planner", "edit": []}]}, "unknown key\\(s\\) edit"),
    ({"entries": [{"role": "planner", "edits": [{"path": "../x", "write": ""}]}]}, "relative path inside"),
    ({"entries": [{"role": "planner", "edits": [{"path": "a", "write": "", "patch": ""}]}]}, "exactly one of"),
    ({"entries": [{"role": "planner", "edits": [{"path": "a", "replace": {"old": ""}}]}]}, "replace must be"),
    ({"entries": [{"role": "planner", "sleep_s": -1}]}, "sleep_s must be a number >= 0"),
    ({"entries": [{"role": "planner", "output": ["x"]}]}, "output must be a JSON object"),
    ({"entries": [], "defaults": {"judge": {}}}, "defaults.judge is not a role"),
    ({"entries": [], "extra": 1}, "unknown key\\(s\\) extra"),
    ({"entries": {}}, "an 'entries' list"),
])
def test_bad_scripts_are_refused_with_what_to_fix(script, message):
    with pytest.raises(BackendError, match=message):
        backend_get(name="scripted", config={"script": script})


def test_role_schemas_accept_good_outputs_and_name_each_problem():
    diagnosis = {"clusters": [{"id": "c1", "title": "t", "task_ids": ["a"], "root_cause": "r", "confidence": 0.7,
                               "evidence": [{"file": "pkg/router.py", "line": 2, "quote": "return 'billing'"}]}],
                 "not_reproduced_task_ids": [], "notes": ""}
    assert output_validate(output=diagnosis, schema=DIAGNOSIS_SCHEMA) == []
    bad = json.loads(json.dumps(diagnosis))
    bad["clusters"][0]["evidence"][0]["quote"] = "x" * 201
    bad["clusters"][0]["confidence"] = 2
    assert output_validate(output=bad, schema=DIAGNOSIS_SCHEMA) == [
        "output.clusters[0].confidence: 2 is greater than the maximum of 1",
        f"output.clusters[0].evidence[0].quote: '{'x' * 201}' is too long",
    ]
    assert output_validate(output=None, schema=DIAGNOSIS_SCHEMA) == ["output: no JSON object was returned"]
    assert output_validate(value=["a list"], schema=DIAGNOSIS_SCHEMA) == ["output: ['a list'] is not of type 'object'"]

    assert output_validate(output={"verdict": "MAYBE", "issues": []}, schema=PLAN_REVIEW_SCHEMA) == [
        "output.verdict: 'MAYBE' is not one of ['APPROVE', 'REJECT_ARCHITECTURAL', 'REJECT_COMPLETENESS']",
    ]
    review = {"verdict": "APPROVE", "issues": [{"severity": "blocker", "detail": "d"}]}
    assert output_validate(output=review, schema=CODE_REVIEW_SCHEMA) == [
        "output.issues[0].severity: 'blocker' is not one of ['critical', 'important', 'minor']",
    ]
    assert output_validate(output={"status": "DONE"}, schema=IMPLEMENTER_SCHEMA) == [
        "output: 'summary' is a required property",
    ]
    with pytest.raises(BackendError, match="schema itself is invalid"):
        output_validate(output={}, schema={"type": "banana"})


@pytest.mark.parametrize("script_name", sorted(p.name for p in SUPPORT_DESK_SCRIPTS.glob("*.json")))
def test_the_example_agents_scripts_satisfy_the_role_schemas(script_name):
    backend = backend_get(name="scripted", config={"script_path": str(SUPPORT_DESK_SCRIPTS / script_name)})
    for role in Role:
        entry = backend.entry_find(role=role.value, iteration=1, round=0)
        assert entry is not None, role
        assert output_validate(output=entry.get("output"), schema=ROLE_SCHEMAS[role]) == [], role


def test_request_is_a_frozen_value(workdir, tmp_path):
    request = request_for(workdir, tmp_path)
    assert replace(request, round=2).round == 2
    with pytest.raises(AttributeError):
        request.round = 3
