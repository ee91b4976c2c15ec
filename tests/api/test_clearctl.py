import json
import subprocess
import sys

import pytest

from clear.cli import main
from tests.api.conftest import make_trace


@pytest.fixture
def clearctl_env(live_server, issued_key, monkeypatch, settings):
    settings.CLEAR_JUDGE_MODEL = ""
    monkeypatch.setenv("CLEAR_URL", live_server.url)
    monkeypatch.setenv("CLEAR_API_KEY", issued_key.secret)
    return live_server


def test_runs_start_wait_status_and_traces_list(clearctl_env, project, capsys):
    wanted = {make_trace(project, release="v7").trace_id, make_trace(project, release="v7").trace_id}
    make_trace(project, release="v6")

    # Celery is eager in tests, so the run completes within the start request.
    assert main(["runs", "start", "--release", "v7", "--judges", "rules", "--wait", "--interval", "0.05"]) == 0
    out = capsys.readouterr()
    assert "succeeded" in out.out and "2/2 traces" in out.err and "Started run" in out.err
    run_id = out.out.split()[1]

    assert main(["runs", "status", run_id, "--json"]) == 0
    status = json.loads(capsys.readouterr().out)
    assert status["id"] == run_id and status["progress"]["done"] == 2 and status["release"] == "v7"
    assert main(["runs", "wait", run_id, "--interval", "0.05"]) == 0
    assert "[" + "#" * 30 + "]" in capsys.readouterr().err

    assert main(["traces", "list", "--release", "v7", "--json"]) == 0
    assert {row["trace_id"] for row in json.loads(capsys.readouterr().out)} == wanted
    assert main(["traces", "list", "--limit", "2"]) == 0
    assert len(capsys.readouterr().out.strip().splitlines()) == 3  # header and two rows, across pages of 2


def test_runs_start_without_wait_prints_the_id(clearctl_env, project, capsys):
    make_trace(project, release="v1")
    assert main(["runs", "start", "--release", "v1", "--judges", "rules"]) == 0
    run_id = capsys.readouterr().out.strip()
    assert len(run_id) == 36


def test_errors_are_reported_with_exit_codes(clearctl_env, monkeypatch, capsys):
    assert main(["runs", "start", "--judges", "nope"]) == 2
    assert "Unknown judge 'nope'" in capsys.readouterr().err
    assert main(["runs", "status", "00000000-0000-0000-0000-000000000000"]) == 2
    assert "404" in capsys.readouterr().err
    monkeypatch.setenv("CLEAR_API_KEY", "sk-clear-wrong")
    assert main(["traces", "list"]) == 2
    assert "not valid" in capsys.readouterr().err
    monkeypatch.delenv("CLEAR_API_KEY")
    assert main(["traces", "list"]) == 2
    assert "CLEAR_API_KEY" in capsys.readouterr().err
    monkeypatch.setenv("CLEAR_API_KEY", "sk-clear-x")
    monkeypatch.setenv("CLEAR_URL", "http://127.0.0.1:9")
    assert main(["traces", "list"]) == 2
    assert "Cannot reach Clear" in capsys.readouterr().err


def test_the_client_needs_only_the_standard_library():
    import ast
    from pathlib import Path

    import clear.cli
    import clear.cli_gate

    for module in (clear.cli, clear.cli_gate):
        tree = ast.parse(Path(module.__file__).read_text())
        modules = {alias.name for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names}
        modules |= {node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) and node.module}
        outside = {m for m in modules if m.split(".")[0] not in sys.stdlib_module_names}
        assert outside <= {"__future__", "clear.cli", "clear.cli_gate"}, (module.__name__, outside)
    # -S: no site-packages, so no Django, Celery or anything else installed; only the checkout on the path.
    env = {"PATH": "/usr/bin:/bin", "CLEAR_API_KEY": "x", "PYTHONPATH": str(Path(clear.cli.__file__).parents[1])}
    stdlib_only = [sys.executable, "-S", "-m", "clear.cli"]
    result = subprocess.run([*stdlib_only, "runs", "--help"], env=env, capture_output=True, text=True, check=True)
    assert "start" in result.stdout and "wait" in result.stdout
    result = subprocess.run([*stdlib_only, "gate", "--help"], env=env, capture_output=True, text=True, check=True)
    assert "--baseline-release" in result.stdout and "--junit" in result.stdout
    # As a module, a gate error is still exit 2 with its message (one CliError class).
    env["CLEAR_URL"] = "http://127.0.0.1:9"
    result = subprocess.run([*stdlib_only, "gate", "--release", "a", "--baseline-release", "b"], env=env,
                            capture_output=True, text=True)
    assert result.returncode == 2 and "Cannot reach Clear" in result.stderr, result.stderr


def test_tickets_export(clearctl_env, mine, tmp_path, capsys):
    assert main(["tickets", "export"]) == 0
    assert mine.marker in capsys.readouterr().out
    target = tmp_path / "bugs.csv"
    assert main(["tickets", "export", "--format", "csv", "--status", "all", "-o", str(target)]) == 0
    assert mine.marker in target.read_text() and target.read_text().startswith("id,")
    assert main(["tickets", "export", "--status", "nope"]) == 2
    assert "status" in capsys.readouterr().err
    assert main(["tickets", "export", "-o", str(tmp_path / "missing" / "bugs.md")]) == 2
    assert "Cannot write" in capsys.readouterr().err


# Issue 40: 2 means "fix something and try again" (usage, key, URL), 1 means a verdict (a failed gate, export or run).
NO_RUN = "00000000-0000-0000-0000-000000000000"
SUBCOMMANDS = {
    "runs start": ["runs", "start", "--release", "v1", "--judges", "rules"],
    "runs status": ["runs", "status", NO_RUN],
    "runs wait": ["runs", "wait", NO_RUN, "--interval", "0.05"],
    "traces list": ["traces", "list"],
    "tickets export": ["tickets", "export"],
    "gate": ["gate", "--release", "B", "--baseline-release", "A"],
}


def _command_paths(parser, prefix=()) -> set[str]:
    import argparse

    paths = set()
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                paths |= _command_paths(sub, (*prefix, name)) or {" ".join((*prefix, name))}
    return paths


def test_the_exit_code_tests_cover_every_subcommand():
    from clear.cli import build_parser

    assert _command_paths(build_parser()) == set(SUBCOMMANDS)


@pytest.fixture
def answering(monkeypatch):
    """A server that answers every request with one status and a Clear-style JSON error; returns its URL."""
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    answer = {"status": 403}

    class Handler(BaseHTTPRequestHandler):
        def _answer(self):
            body = json.dumps({"message": "not allowed", "code": "permission_denied", "extra": {}}).encode()
            self.send_response(answer["status"])
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        do_GET = do_POST = _answer

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()

    def serve(status: int) -> str:
        answer["status"] = status
        url = f"http://127.0.0.1:{server.server_address[1]}"
        monkeypatch.setenv("CLEAR_URL", url)
        monkeypatch.setenv("CLEAR_API_KEY", "sk-clear-x")
        return url

    yield serve
    server.shutdown()
    server.server_close()


def test_tickets_export_with_a_bad_key_exits_2(clearctl_env, monkeypatch, capsys):
    monkeypatch.setenv("CLEAR_API_KEY", "sk-clear-wrong")
    assert main(["tickets", "export"]) == 2
    err = capsys.readouterr().err
    assert "401" in err and "CLEAR_API_KEY" in err


@pytest.mark.parametrize("command", list(SUBCOMMANDS.values()), ids=list(SUBCOMMANDS))
def test_a_bad_key_exits_2_whatever_the_subcommand(clearctl_env, command, monkeypatch, capsys):
    monkeypatch.setenv("CLEAR_API_KEY", "sk-clear-wrong")
    assert main(command) == 2
    err = capsys.readouterr().err
    assert "401" in err and "CLEAR_API_KEY" in err, err


@pytest.mark.parametrize("command", list(SUBCOMMANDS.values()), ids=list(SUBCOMMANDS))
def test_a_refused_key_no_key_or_no_server_exits_2_whatever_the_subcommand(command, answering, monkeypatch,
                                                                          capsys):
    answering(403)  # the key of another project, or a proxy in front of Clear refusing it
    assert main(command) == 2
    err = capsys.readouterr().err
    assert "403" in err and "CLEAR_API_KEY" in err, err
    monkeypatch.delenv("CLEAR_API_KEY")
    assert main(command) == 2
    assert "Set CLEAR_API_KEY" in capsys.readouterr().err
    monkeypatch.setenv("CLEAR_API_KEY", "sk-clear-x")
    monkeypatch.setenv("CLEAR_URL", "http://127.0.0.1:9")
    assert main(command) == 2
    assert "Cannot reach Clear" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exit_info:  # argparse's own usage errors
        main([*command, "--no-such-option"])
    assert exit_info.value.code == 2


def test_a_failed_export_exits_1(answering, capsys):
    answering(500)
    assert main(["tickets", "export"]) == 1
    assert "500" in capsys.readouterr().err


def test_a_run_that_did_not_succeed_exits_1(clearctl_env, project, capsys):
    from diagnosis.models import DiagnosisRun

    run = DiagnosisRun.objects.create(project=project, status=DiagnosisRun.Status.FAILED, total_count=1,
                                      failure_message="the worker died")
    assert main(["runs", "wait", str(run.pk)]) == 1
    assert "the worker died" in capsys.readouterr().out
