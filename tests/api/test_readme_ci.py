"""The README's CI recipe stays valid: its YAML parses, the agent's traces are tagged with the commit, and the
`clearctl gate` command it runs is one clearctl accepts."""

import re
import shlex
from pathlib import Path

import yaml

from clear.cli import build_parser

README = Path(__file__).resolve().parents[2] / "README.md"


def _recipe() -> dict:
    text = README.read_text()
    section = text[text.index("\n## CI gate\n"):]
    block = re.search(r"```yaml\n(.*?)```", section, re.S)
    assert block, "the CI gate section has a GitHub Actions YAML block"
    return yaml.safe_load(block.group(1))


def test_the_recipe_tags_traces_with_the_commit_and_gates_on_them():
    workflow = _recipe()
    steps = workflow["jobs"]["test"]["steps"]
    traced = next(s for s in steps if "OTEL_RESOURCE_ATTRIBUTES" in s.get("env", {}))
    assert traced["env"]["OTEL_RESOURCE_ATTRIBUTES"] == "service.version=${{ github.sha }}"
    assert traced["env"]["OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"].endswith("/v1/traces")
    assert "Authorization=Bearer" in traced["env"]["OTEL_EXPORTER_OTLP_TRACES_HEADERS"]
    gate = next(s for s in steps if "clearctl gate" in s.get("run", ""))
    assert steps.index(gate) > steps.index(traced)
    argv = shlex.split(gate["run"].replace("${{ github.sha }}", "SHA")
                       .replace("${{ github.event.pull_request.base.sha }}", "BASE"))
    args = build_parser().parse_args(argv[1:])
    assert (args.release, args.baseline_release, args.wait, args.junit) == ("SHA", "BASE", True, "clear-gate.xml")
    upload = next(s for s in steps if str(s.get("uses", "")).startswith("actions/upload-artifact"))
    assert upload["with"]["path"] == args.junit
    assert set(workflow["jobs"]["test"]["env"]) == {"CLEAR_URL", "CLEAR_API_KEY"}
