"""Small formatting filters for the pages (numbers only: trace content goes through frontend.render)."""

from django import template

register = template.Library()


@register.filter
def money(value) -> str:
    """$0.0123 for small amounts, $12.35 for larger ones, $0 for none."""
    try:
        amount = float(value or 0)
    except (TypeError, ValueError):
        return "—"
    if amount == 0:
        return "$0"
    if abs(amount) < 1:
        return f"${amount:.4f}".rstrip("0").rstrip(".") if abs(amount) >= 0.0001 else f"${amount:.2g}"
    return f"${amount:,.2f}"


@register.filter
def duration(ms) -> str:
    """Milliseconds as 850 ms, 2.3 s, 4m 05s."""
    if ms is None:
        return "—"
    ms = float(ms)
    if ms < 1000:
        return f"{ms:.0f} ms"
    if ms < 60_000:
        return f"{ms / 1000:.1f} s"
    minutes, seconds = divmod(int(ms // 1000), 60)
    return f"{minutes}m {seconds:02d}s"


@register.filter
def percent(rate) -> str:
    if rate is None:
        return "—"
    return f"{100 * float(rate):.0f}%"


@register.filter
def percent_num(rate) -> str:
    """A CSS width: 0–100 with at most one decimal."""
    if rate is None:
        return "0"
    return f"{max(0.0, min(100.0, 100 * float(rate))):.1f}"


@register.filter
def width_class(rate) -> str:
    """A rate (0..1) as the bar class of its width, .w-0 to .w-100 in clear.css (the Content-Security-Policy
    allows no style="" attribute)."""
    try:
        share = 0.0 if rate is None else float(rate)
    except (TypeError, ValueError):
        share = 0.0
    return f"w-{round(max(0.0, min(1.0, share)) * 100)}"


@register.filter
def thousands(value) -> str:
    try:
        return f"{int(value):,}"
    except (TypeError, ValueError):
        return "—"


@register.filter
def shortid(value, length: int = 8) -> str:
    return str(value)[: int(length)]


@register.filter
def elapsed(obj) -> str:
    """The duration between an object's start_time and end_time."""
    start, end = getattr(obj, "start_time", None), getattr(obj, "end_time", None)
    if start is None or end is None:
        return "—"
    return duration(max((end - start).total_seconds(), 0) * 1000)
