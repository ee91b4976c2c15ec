"""Domain errors of evolution (rendered as {"message", "code", "extra"} under /api/v1/)."""

from clear.errors import ClearError


class EvolutionError(ClearError):
    code = "evolution_error"


class EvolutionConfigInvalid(EvolutionError):
    code = "evolution_config_invalid"


class PersonRequired(EvolutionError):
    # A project key is software acting for the project; making a release live or taking it down is a decision a
    # person takes, logged in, where the job's evidence is shown.
    status_code = 403
    code = "person_required"


class SandboxUnavailable(EvolutionError):
    # The server lacks the isolation the configuration asks for; the client cannot fix that by resending.
    status_code = 503
    code = "sandbox_unavailable"


class GitError(EvolutionError):
    status_code = 500
    code = "git_error"


class BackendError(EvolutionError):
    code = "backend_error"


class BackendCrashed(EvolutionError):
    # Not a BackendError: a crash is a stage outcome (retry or fail the stage), a BackendError is a configuration fault.
    status_code = 500
    code = "backend_crashed"
