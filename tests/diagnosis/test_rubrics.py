import pytest

from diagnosis.errors import RubricInvalidError
from diagnosis.models import Rubric
from diagnosis.selectors import rubric_get, rubric_list
from diagnosis.services import rubric_create, rubric_delete, rubric_update


@pytest.mark.parametrize("kind, config, message", [
    ("nope", {}, "Unknown rubric kind 'nope'"),
    ("regex", {"pattern": "(unclosed"}, "not a valid regular expression"),
    ("regex", {"pattern": "x", "expect": "maybe"}, "expect must be one of present, absent"),
    ("regex", {"pattern": "x", "spans": {"agent": "a"}}, "unknown keys ['agent']"),
    ("jsonpath", {"path": "$[?(@.a)]"}, "path: JSONPath"),
    ("jsonpath", {"path": "$.a", "assert": "equals"}, 'needs "value"'),
    ("tool_order", {"then": "b"}, "first must be a non-empty string"),
    ("tool_never", {"tool": []}, "tool must be a non-empty string"),
    ("coverage", {"path": "$.id", "target": {"node": "w"}}, "sources is required"),
    ("coverage", {"path": "$.id", "sources": {"kind": "TOOL"}, "target": {}}, "target must select some spans"),
    ("llm", {"criterion": " "}, 'needs "criterion"'),
    ("tool_never", {"tool": "x", "extra": 1}, "Unknown keys ['extra']"),
    ("tool_never", {"tool": "x", "when": {"goal_regex": "["}}, "when.goal_regex"),
])
def test_rubric_create_refuses_bad_configs_with_a_clear_message(project, kind, config, message):
    with pytest.raises(RubricInvalidError) as caught:
        rubric_create(project=project, name="r", kind=kind, config=config)
    assert message in caught.value.message and caught.value.message.startswith("Rubric 'r': ")
    assert not Rubric.objects.exists()


def test_rubric_create_update_delete(project, outsider_project):
    rubric = rubric_create(project=project, name="answer cites a refund id", kind="regex",
                           config={"pattern": r"RF-\d+"}, node="writer")
    assert rubric.config == {"pattern": r"RF-\d+", "expect": "present", "field": "output", "spans": {},
                             "ignore_case": False}
    with pytest.raises(RubricInvalidError, match="already has a rubric named"):
        rubric_create(project=project, name="answer cites a refund id", kind="tool_never", config={"tool": "x"})
    rubric_create(project=outsider_project, name="answer cites a refund id", kind="tool_never", config={"tool": "x"})
    rubric_update(rubric=rubric, config={"pattern": r"RF-\d{4}", "expect": "present"}, enabled=False, node=None)
    rubric.refresh_from_db()
    assert rubric.config["pattern"] == r"RF-\d{4}" and not rubric.enabled and rubric.node == ""
    with pytest.raises(RubricInvalidError, match="first must be"):
        rubric_update(rubric=rubric, kind="tool_order")  # the old config does not fit the new kind
    assert list(rubric_list(project=project)) == [rubric]
    assert rubric_get(project=project, rubric_id=rubric.pk) == rubric
    rubric_delete(rubric=rubric)
    assert not rubric_list(project=project).exists()
