"""Query parameters under /api/v1/: an operation answers 400 for one it does not read."""

from rest_framework.request import Request

from clear.api.pagination import CURSOR_PARAM, PAGE_SIZE_PARAM
from clear.errors import ClearError

FORMAT_PARAM = "format"  # DRF's URL_FORMAT_OVERRIDE, accepted everywhere


class UnknownQueryParameterError(ClearError):
    code = "unknown_parameter"


class KnownQueryParameters:
    """Answers 400 for a query parameter the operation does not read: a misspelt filter (`?trace_id=` for `?trace=`)
    would otherwise be ignored and the unfiltered rows taken for the filtered ones.

    An operation reads the fields of its `FilterSerializer`, the pagination parameters when `is_paginated`, and
    `format`."""

    is_paginated: bool = False

    @classmethod
    def accepted_query_params(cls) -> list[str]:
        filters = getattr(cls, "FilterSerializer", None)
        names = list(filters().fields) if filters is not None else []
        names += [*((CURSOR_PARAM, PAGE_SIZE_PARAM) if cls.is_paginated else ()), FORMAT_PARAM]
        return list(dict.fromkeys(names))

    def initial(self, request: Request, *args, **kwargs) -> None:
        super().initial(request, *args, **kwargs)  # authentication and throttling answer first
        accepted = self.accepted_query_params()
        unknown = [name for name in request.query_params if name not in accepted]
        if unknown:
            names = ", ".join(unknown)
            raise UnknownQueryParameterError(
                f"Unknown query parameter{'s' if len(unknown) > 1 else ''} {names}: this endpoint accepts "
                f"{', '.join(accepted)}.", extra={"unknown": unknown, "accepted": accepted})
