"""Forms of the pages: the trace filters (GET), starting a diagnosis run, rubrics. Validation that belongs to the
domain (rubric configs, run filters) stays in the services; these only parse what the browser sent."""

from __future__ import annotations

import json

from django import forms

from diagnosis.models import Rubric

DATETIME_FORMATS = ["%Y-%m-%dT%H:%M", "%Y-%m-%dT%H:%M:%S", "%Y-%m-%d %H:%M", "%Y-%m-%d %H:%M:%S", "%Y-%m-%d"]


class DateTimeLocalInput(forms.DateTimeInput):
    input_type = "datetime-local"

    def __init__(self, **kwargs):
        super().__init__(format="%Y-%m-%dT%H:%M", **kwargs)


class TraceFilterForm(forms.Form):
    q = forms.CharField(required=False, max_length=200, label="Search")
    release = forms.CharField(required=False, max_length=200)
    outcome = forms.ChoiceField(required=False, choices=[("", "Any outcome"), ("failure", "Failure"),
                                                         ("success", "Success"), ("unknown", "No outcome")])
    node = forms.CharField(required=False, max_length=300)
    since = forms.DateTimeField(required=False, input_formats=DATETIME_FORMATS, widget=DateTimeLocalInput(),
                                label="From (UTC)")
    until = forms.DateTimeField(required=False, input_formats=DATETIME_FORMATS, widget=DateTimeLocalInput(),
                                label="To (UTC)")

    def clean(self):
        data = super().clean()
        if data.get("since") and data.get("until") and data["since"] >= data["until"]:
            raise forms.ValidationError("The time window's start must be before its end.")
        return data


class RunStartForm(forms.Form):
    name = forms.CharField(required=False, max_length=200)
    release = forms.CharField(required=False, max_length=200)
    outcome = forms.ChoiceField(required=False, choices=[("", "Any outcome"), ("failure", "Failures only"),
                                                         ("success", "Successes only")])
    since = forms.DateTimeField(required=False, input_formats=DATETIME_FORMATS, widget=DateTimeLocalInput(),
                                label="Traces from (UTC)")
    until = forms.DateTimeField(required=False, input_formats=DATETIME_FORMATS, widget=DateTimeLocalInput(),
                                label="Traces before (UTC)")
    sample_rate = forms.FloatField(initial=1.0, min_value=0.0001, max_value=1.0, label="Sample rate",
                                   widget=forms.NumberInput(attrs={"step": "any"}))
    judges = forms.MultipleChoiceField(required=True, widget=forms.CheckboxSelectMultiple,
                                       error_messages={"required": "Pick at least one judge."})
    model = forms.CharField(required=False, max_length=300, label="LLM judge model")
    budget_tokens = forms.IntegerField(required=False, min_value=0, label="Token budget")
    budget_cost = forms.FloatField(required=False, min_value=0, label="Cost budget (USD)",
                                   widget=forms.NumberInput(attrs={"step": "any"}))

    def __init__(self, *args, judge_choices: list[tuple[str, str]], **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["judges"].choices = judge_choices


class RubricForm(forms.Form):
    name = forms.CharField(max_length=200)
    kind = forms.ChoiceField(choices=Rubric.Kind.choices)
    node = forms.CharField(required=False, max_length=300, label="Node (empty: every node)")
    description = forms.CharField(required=False, widget=forms.Textarea(attrs={"rows": 2}))
    config = forms.CharField(widget=forms.Textarea(attrs={"rows": 7, "spellcheck": "false"}), label="Config (JSON)")
    enabled = forms.BooleanField(required=False, initial=True)

    def clean_config(self):
        text = self.cleaned_data["config"]
        try:
            value = json.loads(text)
        except json.JSONDecodeError as exc:
            raise forms.ValidationError(f"The config is not valid JSON: {exc.msg} (line {exc.lineno}, "
                                        f"column {exc.colno}).") from None
        if not isinstance(value, dict):
            raise forms.ValidationError('The config must be a JSON object, e.g. {"pattern": "refund"}.')
        return value


class IssueTrackerForm(forms.Form):
    """The tracker connection. The token field is write-only: it is never filled in from the stored connection,
    and left empty it keeps the stored token."""

    base_url = forms.CharField(max_length=500, initial="https://api.github.com", label="API base URL",
                               help_text="https://api.github.com, https://github.example.com/api/v3 (Enterprise) or "
                                         "https://gitea.example.com/api/v1")
    repository = forms.CharField(max_length=300, label="Repository", help_text="owner/name")
    token = forms.CharField(max_length=500, required=False, label="Token",
                            widget=forms.PasswordInput(render_value=False, attrs={"autocomplete": "off"}),
                            help_text="a token that may read and write the repository's issues")
    enabled = forms.BooleanField(required=False, initial=True, label="Push tickets automatically when they change")


class RetentionForm(forms.Form):
    days = forms.IntegerField(required=False, min_value=0, max_value=36500, label="Keep traces for (days)",
                              help_text="Empty: the server's default (CLEAR_RETENTION_DAYS). 0: keep forever.")
