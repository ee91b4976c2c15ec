from django.http import HttpRequest

from clear.projects.selectors import project_list_for_user


def projects(request: HttpRequest) -> dict:
    """Every page's project switcher."""
    user = getattr(request, "user", None)
    if user is None or not user.is_authenticated:
        return {}
    return {"user_projects": list(project_list_for_user(user=user))}
