"""Who may see what in the navigation (the views check again: a hidden link is no permission)."""

from django import template

from clear.projects.selectors import membership_is_owner

register = template.Library()


@register.filter
def owned_by(project, user) -> bool:
    return bool(project and user and user.is_authenticated and membership_is_owner(project=project, user=user))
