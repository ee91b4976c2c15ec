"""Domain errors of the diagnosis app (rendered as {"message", "code", "extra"} under /api/v1/)."""

from clear.errors import ClearError, ConflictError, NotFoundError


class DiagnosisError(ClearError):
    pass


class RubricInvalidError(DiagnosisError):
    code = "rubric_invalid"


class DiagnosisRunInvalidError(DiagnosisError):
    code = "run_invalid"


class DiagnosisRunNotFoundError(NotFoundError):
    pass


class RubricNotFoundError(NotFoundError):
    pass


class DiagnosisRunFinishedError(ConflictError):
    code = "run_finished"
