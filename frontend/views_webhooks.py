"""Settings → Webhooks: the project's webhooks with their last deliveries, subscribing a URL, a test delivery
(`webhook.ping`) and delete. Owners only, as the audit log: outsiders get 404, members 403 (a webhook's URL and
signing secret decide where the project's events go).

Writes go through `clear.webhooks.services`, the very functions the REST API calls, so a URL is checked exactly as the
API checks it (`webhook_url_check`: http(s) only, public addresses unless CLEAR_WEBHOOK_ALLOW_PRIVATE) and the
ClearError message the API answers with is the one shown on the form."""

from __future__ import annotations

from django import forms
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_POST

from clear.errors import ClearError, NotFoundError
from clear.projects.models import Project
from clear.projects.selectors import membership_is_owner
from clear.webhooks.models import Webhook
from clear.webhooks.selectors import webhook_delivery_list, webhook_get, webhook_list
from clear.webhooks.services import EVENTS, webhook_create, webhook_delete, webhook_ping
from frontend.views import project_for

DELIVERIES_SHOWN = 5
ISSUED_SESSION_KEY = "issued_webhook_secret"


class WebhookForm(forms.Form):
    # A CharField, not a URLField: the service's check is the only one, so the page refuses what the API refuses,
    # with the API's words. Only the column's length is checked here.
    url = forms.CharField(max_length=2000, label="URL",
                          help_text="http:// or https://; its host must be a public address unless the server sets "
                                    "CLEAR_WEBHOOK_ALLOW_PRIVATE")
    # Not required here: the service says which events exist when none is picked.
    events = forms.MultipleChoiceField(required=False, widget=forms.CheckboxSelectMultiple, label="Events",
                                       choices=[(name, f"{name}: {text}") for name, text in EVENTS.items()])
    description = forms.CharField(max_length=200, required=False, label="Description (optional)")


def _owned_project(request: HttpRequest, slug: str) -> Project:
    project = project_for(request, slug)  # outsiders: 404
    if not membership_is_owner(project=project, user=request.user):
        raise PermissionDenied("Only the project's owners manage its webhooks")  # members: 403
    return project


def _webhook_for(project: Project, webhook_id: int) -> Webhook:
    try:
        return webhook_get(project=project, webhook_id=webhook_id)
    except NotFoundError as exc:  # another project's webhook, or none: the same 404
        raise Http404(exc.message) from exc


def _page(request: HttpRequest, project: Project, form: WebhookForm, *, status: int = 200) -> HttpResponse:
    # One deliveries query per webhook: a project has a handful of webhooks, and each shows only its last few.
    rows = [(webhook, list(webhook_delivery_list(project=project, webhook=webhook)[:DELIVERIES_SHOWN]))
            for webhook in webhook_list(project=project)]
    context = {"project": project, "nav": "settings", "settings_tab": "webhooks", "form": form, "rows": rows,
               "issued": request.session.pop(ISSUED_SESSION_KEY, None), "deliveries_shown": DELIVERIES_SHOWN}
    return render(request, "frontend/webhooks.html", context, status=status)


@login_required
def webhooks(request: HttpRequest, slug: str) -> HttpResponse:
    project = _owned_project(request, slug)
    if request.method != "POST":
        return _page(request, project, WebhookForm(initial={"events": list(EVENTS)}))
    form = WebhookForm(request.POST)
    if form.is_valid():
        data = form.cleaned_data
        try:
            webhook = webhook_create(project=project, url=data["url"].strip(), events=data["events"],
                                     description=data["description"].strip())
        except ClearError as exc:
            form.add_error(None, exc.message)
        else:
            # As the API does: the whole secret is shown once, on the next page view, then only its first characters.
            request.session[ISSUED_SESSION_KEY] = {"id": webhook.pk, "url": webhook.url, "secret": webhook.secret}
            messages.success(request, f"Webhook {webhook.url} created; it is sent {', '.join(webhook.events)}.")
            return redirect("frontend:webhooks", slug=project.slug)
    return _page(request, project, form, status=400)


@login_required
@require_POST
def webhook_test(request: HttpRequest, slug: str, webhook_id: int) -> HttpResponse:
    project = _owned_project(request, slug)
    webhook = _webhook_for(project, webhook_id)
    webhook_ping(webhook=webhook)
    messages.success(request, f"Test delivery (webhook.ping) queued for {webhook.url}; reload to see its status in "
                              "the webhook's deliveries.")
    return redirect("frontend:webhooks", slug=project.slug)


@login_required
@require_POST
def webhook_remove(request: HttpRequest, slug: str, webhook_id: int) -> HttpResponse:
    project = _owned_project(request, slug)
    webhook = _webhook_for(project, webhook_id)
    url = webhook.url
    webhook_delete(webhook=webhook)
    messages.success(request, f"Webhook {url} deleted, with its delivery log; it is sent nothing more.")
    return redirect("frontend:webhooks", slug=project.slug)
