import pytest

from diagnosis.judges.jsonpath import JsonPathError, jsonpath_compile, jsonpath_values


@pytest.mark.parametrize("path, expected", [
    ("$.a.b", [1]),
    ("$.list[*].id", ["x", "y"]),
    ("$..id", ["x", "y", "z"]),
    ("$.list[1]", [{"id": "y"}]),
    ("$.list[-1].id", ["y"]),
    ("$['a']['b']", [1]),
    ("$.a.*", [1]),
    ("$.missing.b", []),
])
def test_jsonpath_subset(path, expected):
    document = {"a": {"b": 1}, "list": [{"id": "x"}, {"id": "y"}], "deep": {"more": [{"id": "z"}]}}
    assert jsonpath_values(path, document) == expected


@pytest.mark.parametrize("path, message", [
    ("a.b", "must start with '$'"),
    ("$.", "expected a key name"),
    ("$[?(@.x > 1)]", "filters, slices and unions"),
    ("$[0:2]", "filters, slices and unions"),
    ("$.a[", "never closed"),
])
def test_jsonpath_refuses_what_it_cannot_read(path, message):
    with pytest.raises(JsonPathError, match=message.replace("$", r"\$").replace("(", r"\(")):
        jsonpath_compile(path)
