"""Errors of the release/hot-swap library (all ClearErrors, so the API renders them like any other)."""

from clear.errors import ConflictError, NotFoundError
from evolution.errors import EvolutionError


class DeployError(EvolutionError):
    code = "deploy_error"


class DeployInvalid(DeployError):
    """A caller mistake: bad release id, missing source, unusable probe or activator settings."""

    code = "deploy_invalid"


class ReleaseNotFound(NotFoundError, DeployError):
    code = "release_not_found"


class ReleaseExists(ConflictError, DeployError):
    code = "release_exists"


class DeployBusy(ConflictError, DeployError):
    code = "deploy_busy"


class DeployStateCorrupt(DeployError):
    status_code = 500
    code = "deploy_state_corrupt"


class StageFailed(DeployError):
    # A runtime outcome (git archive failed, copy failed); hot_swap_promote turns it into outcome "failed".
    status_code = 500
    code = "stage_failed"


class ActivatorError(DeployError):
    # reload/stop could not bring the release up; hot_swap_promote treats it as an unhealthy release.
    status_code = 500
    code = "activator_error"
