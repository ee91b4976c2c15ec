"""Issue 41's two figures, the same on every dataset: coverage and ticket precision, "within one agent turn".

Turns. The agent's decision spans (LLM spans, and AGENT spans with no LLM or AGENT span below them: an AGENT span
that wraps model calls is a container, not a decision) are numbered 1, 2, … in start order. Every other span (a
TOOL, a CHAIN, a container) belongs to the turn of the latest decision span that started at or before it, 0 when
none did. A statement and a labelled span are *within one agent turn* when their turn numbers differ by at most 1.

Coverage: a labelled failing run is covered when an eligible insight (associated or unknown, titled — not an
"other" bucket —, not rejected; merged insights followed) has a member statement on that run that sits within one
agent turn of one of its labelled spans (or that `extra_hit` accepts: tau-airline's missing actions, which have no
span).

Ticket precision: a ticket (an insight's own, not merged, not closed) is *real* when at least half of its
insight's member statements in labelled failing runs hit that way. A ticket with no statement in a labelled
failing run is counted apart ("unscored"): nothing says whether it is real.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field

ELIGIBLE = ("associated", "unknown")


def turn_numbers(*, spans: list[dict]) -> dict[str, int]:
    """span_id -> turn number, for one trace's spans (dicts with span_id, parent, kind, start)."""
    children: dict[str, list[dict]] = defaultdict(list)
    for span in spans:
        children[span["parent"]].append(span)

    def has_decision_below(span_id: str, seen: set[str]) -> bool:
        for child in children.get(span_id, []):
            if child["span_id"] in seen:
                continue
            seen.add(child["span_id"])
            if child["kind"] in ("LLM", "AGENT") or has_decision_below(child["span_id"], seen):
                return True
        return False

    ordered = sorted(spans, key=lambda s: s["start"])
    turns: dict[str, int] = {}
    current = 0
    for span in ordered:
        decision = span["kind"] == "LLM" or (span["kind"] == "AGENT"
                                             and not has_decision_below(span["span_id"], {span["span_id"]}))
        if decision:
            current += 1
        turns[span["span_id"]] = current
    return turns


@dataclass
class Labelled:
    """One labelled failing run: its trace pk, the labelled span ids, and optionally a test for statements that hit
    a label without a span (tau-airline's missing actions)."""

    trace_pk: int
    spans: set[str]
    split: str = "all"
    extra_hit: Callable[[dict], bool] | None = None
    kinds: list[str] = field(default_factory=list)


def statement_spans(statement: dict) -> set[str]:
    """The span a statement sits on: its own span, else its feedback's target."""
    return {s for s in (statement.get("span_id"), statement.get("feedback__target_span_id")) if s}


def hits(*, statement: dict, label: Labelled, turns: dict[str, int]) -> bool:
    if label.extra_hit is not None and label.extra_hit(statement):
        return True
    labelled = [turns[s] for s in label.spans if s in turns]
    mine = [turns[s] for s in statement_spans(statement) if s in turns]
    return any(abs(a - b) <= 1 for a in mine for b in labelled)


def eligible(row: dict | None) -> bool:
    return row is not None and row["review"] != "rejected" and not row["is_other"] and row["association"] in ELIGIBLE


def inconclusive(row: dict | None) -> bool:
    """Measured only, nothing ships it: a titled, not rejected, not by-design insight "not associated" whose lift
    interval includes 1 while its point estimate is above 1 — with ~50 runs, "not associated" mostly means "too few
    traces to tell". The `inconclusive` variant counts these as eligible too (and as if each had a ticket)."""
    return (row is not None and row["review"] != "rejected" and not row["is_other"] and not row.get("by_design")
            and row["association"] == "not_associated" and (row.get("lift") or 0) > 1
            and row.get("lift_low") is not None and row["lift_low"] <= 1)


def score(*, rows: dict[int, dict], statements: list[dict], spans: dict[int, list[dict]],
          labelled: list[Labelled], splits: tuple[str, ...] = ("all",)) -> dict:
    """{split: {coverage…, tickets…}} over the labelled failing runs of each split."""
    by_trace: dict[int, list[dict]] = defaultdict(list)
    for s in statements:
        by_trace[s["trace_id"]].append(s)
    turns = {label.trace_pk: turn_numbers(spans=spans.get(label.trace_pk, [])) for label in labelled}
    result = {}
    for split in splits:
        runs = [label for label in labelled if split == "all" or label.split == split]
        covered = reached = covered_inconclusive = 0
        # insight pk -> [hit, total] over its member statements in this split's labelled failing runs
        tally: dict[int, list[int]] = defaultdict(lambda: [0, 0])
        for label in runs:
            is_covered = is_reached = is_covered_inconclusive = False
            for s in by_trace.get(label.trace_pk, []):
                hit = hits(statement=s, label=label, turns=turns[label.trace_pk])
                is_reached |= hit
                for pk in s["insights"]:
                    tally[pk][0] += hit
                    tally[pk][1] += 1
                    if hit and eligible(rows.get(pk)):
                        is_covered = True
                    if hit and (eligible(rows.get(pk)) or inconclusive(rows.get(pk))):
                        is_covered_inconclusive = True
            covered += is_covered
            reached += is_reached
            covered_inconclusive += is_covered_inconclusive
        # Tickets a user would see as open work: an insight's own, not merged into another, not closed.
        tickets = [r for r in rows.values() if r["ticket"] and not r["ticket"]["merged_into"]
                   and r["ticket"]["status"] in ("open", "in_progress")]
        scored = [r for r in tickets if tally[r["id"]][1]]
        real = [r for r in scored if 2 * tally[r["id"]][0] >= tally[r["id"]][1]]
        # The variant: inconclusive insights count as eligible and as if ticketed (unless a ticket tracks them).
        extra = [r for r in rows.values() if inconclusive(r) and not r.get("ticket_via_system")
                 and not (r["ticket"] and not r["ticket"]["merged_into"]
                          and r["ticket"]["status"] in ("open", "in_progress"))]
        scored_v = scored + [r for r in extra if tally[r["id"]][1]]
        real_v = [r for r in scored_v if 2 * tally[r["id"]][0] >= tally[r["id"]][1]]
        variant = {
            "covered": covered_inconclusive,
            "coverage": round(covered_inconclusive / len(runs), 4) if runs else None,
            "insights": len(extra), "tickets": len(tickets) + len(extra), "tickets_scored": len(scored_v),
            "tickets_real": len(real_v),
            "ticket_precision": round(len(real_v) / len(scored_v), 4) if scored_v else None,
            "rows": [{"insight": r["id"], "title": r["title"], "hit": tally[r["id"]][0],
                      "statements": tally[r["id"]][1], "lift": r["lift"], "lift_low": r["lift_low"],
                      "real": r in real_v} for r in extra],
        }
        result[split] = {
            "runs": len(runs), "covered": covered, "coverage": round(covered / len(runs), 4) if runs else None,
            # Any statement within one turn, whatever its insight: what the judges reach before association.
            "reached": reached,
            "tickets": len(tickets), "tickets_scored": len(scored), "tickets_real": len(real),
            "ticket_precision": round(len(real) / len(scored), 4) if scored else None,
            "ticket_rows": [{"insight": r["id"], "title": r["title"], "hit": tally[r["id"]][0],
                             "statements": tally[r["id"]][1], "real": r in real} for r in tickets],
            "inconclusive": variant,
        }
    return result
