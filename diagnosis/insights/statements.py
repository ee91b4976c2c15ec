"""Issue statements from a run's feedback: what gets embedded and clustered.

Only problem feedback speaks: status ok or truncated, and verdict "fail" or at least one issue. From each such
Feedback row, in order:
* every issue becomes one statement, "title: detail" (the detail is left out when the title already says it), with
  the issue's severity and the evidence the judge cited (verified when the feedback was written);
* the critique of a failing LLM judgement is split into atomic sentences (diagnosis.clustering.split_critique drops
  praise, boilerplate and fragments), each citing the judged span. Rule and rubric critiques are templates that only
  restate their issues, so they are used only when such a judgement has no issue.
A statement's node is the node of the span the feedback targets ("" for whole-trace feedback unless its rubric is
scoped to a node), or the node the judge gave it (`details["node"]`: a recovered error, a contrastive finding,
both on a tool call, give the call's node in the judges' view, the calling agent's, where the stored node of a tool
recorded as a plain span is its own name): node "" statements take part at system level only. Repeats within one feedback are kept once.
A rule judge's issue about a span also gets a pattern, its title with instance values generalised (rule titles name
the tool or span and what went wrong, an error's message with its values taken out: judges/rules/errors.py), and
the tool it is about (the judged span's tool, else the one tool its evidence cites): the clustering groups such
statements by pattern alone, never by resemblance, so different tools or errors are never one insight
(diagnosis/clustering/cluster.py).
Feedback marked wrong (FeedbackCorrection), and later feedback of the same judge on the same trace and target, gives
no statements.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from django.db.models import Q

from diagnosis.clustering.statements import normalize_text, split_critique
from diagnosis.models import DiagnosisRun, Feedback, FeedbackCorrection
from traces.models import Span
from traces.selectors import trace_days_for

SEVERITY_RANK = {"low": 0, "medium": 1, "high": 2, "critical": 3}
_SPAN_CHUNK = 500


@dataclass(slots=True)
class Draft:
    """One statement before it is stored; `key` is the id the clustering library sees."""

    feedback_id: int
    trace_pk: int
    trace_id: str
    release: str
    position: int
    kind: str  # "issue" | "critique"
    text: str
    node: str
    span_id: str
    judge: str
    severity: str
    evidence: list[dict] = field(default_factory=list)
    title: str = ""  # the issue's own title (issue statements): a better offline insight title than the medoid
    started: float | None = None  # epoch seconds of the judged span's start: which symptom of a problem came first
    tool: str = ""  # the tool the statement is about, when a rule judged a tool call
    pattern: str = ""  # a rule finding's generalised title: statements are grouped by it (module docstring)

    @property
    def key(self) -> str:
        return f"{self.feedback_id}:{self.position}"


def issue_text(title: str, detail: str) -> str:
    title, detail = " ".join((title or "").split()), " ".join((detail or "").split())
    if not detail or normalize_text(detail) in normalize_text(title):
        return title
    if not title or normalize_text(title) in normalize_text(detail):
        return detail
    return f"{title.rstrip(' .:;')}: {detail}"


def _severity_of_score(score: float | None) -> str:
    if score is None:
        return "medium"
    return "high" if score <= 0.25 else "medium" if score <= 0.6 else "low"


def corrected_keys(*, project_id: int) -> set[tuple[int, str, str]]:
    """(trace pk, judge, target span id or "") of every feedback marked wrong in the project."""
    rows = FeedbackCorrection.objects.filter(project_id=project_id)
    return {(t, j, s or "") for t, j, s in rows.values_list("feedback__trace_id", "feedback__judge",
                                                              "feedback__target_span_id")}


def _span_nodes(pairs: set[tuple[int, str]], *, project_id: int) -> dict[tuple[int, str], tuple[str, float, str]]:
    """(trace pk, span id) -> (the span's node, its start as epoch seconds, its tool name)."""
    by_trace: dict[int, set[str]] = {}
    for trace_pk, span_id in pairs:
        by_trace.setdefault(trace_pk, set()).add(span_id)
    nodes: dict[tuple[int, str], tuple[str, float, str]] = {}
    traces = sorted(by_trace)
    for start in range(0, len(traces), _SPAN_CHUNK):
        chunk = traces[start:start + _SPAN_CHUNK]
        span_ids = set().union(*(by_trace[t] for t in chunk))
        days = trace_days_for(project=project_id, trace_pks=chunk)  # only their days' span partitions
        spans = Span.objects.filter(trace_id__in=chunk, trace_day__in=days, span_id__in=span_ids)
        for trace_pk, span_id, node, started, tool in spans.values_list("trace_id", "span_id", "node", "start_time",
                                                                         "tool_name"):
            nodes[(trace_pk, span_id)] = (node or "", started.timestamp(), tool or "")
    return nodes


def _rule_pattern(judge: str, title: str) -> str:
    """The pattern of a rule judge's issue: its title with ids, numbers and quoted values generalised, per judge.
    A contrastive finding's title is its feature ("Fails more often when `X` is called before `Y`"): each finding is
    its own pattern too, so findings that share the template's words are never one insight."""
    from diagnosis.clustering.naming import title_generalize

    title = " ".join(title.split())
    deterministic = judge.startswith("rule.") or judge == "contrastive"
    return f"{judge}|{title_generalize(title)}" if deterministic and title else ""


def _tool_of(trace_pk: int, target: str, evidence: list[dict], spans: dict) -> str:
    """The judged span's tool, else the one tool the evidence cites (a tool call's finding targets its decider)."""
    tool = spans.get((trace_pk, target), ("", None, ""))[2] if target else ""
    if tool:
        return tool
    # The deciding step a tool call's finding targets (judges/decision.py) is cited too, and names no tool.
    cited = {spans.get((trace_pk, e["span_id"]), ("", None, ""))[2] for e in evidence} - {""}
    return cited.pop() if len(cited) == 1 else ""


def statements_collect(*, run: DiagnosisRun, trace_pks=None, feedback_after: int = 0,
                       feedback_upto: int | None = None) -> list[Draft]:
    """Every statement of the run's problem feedback, in feedback order (see the module docstring). A continuous
    refresh narrows it to its window's traces (trace_pks) and to the feedback judged since its last refresh."""
    feedback = Feedback.objects.filter(run=run, status__in=(Feedback.Status.OK, Feedback.Status.TRUNCATED))
    if trace_pks is not None:
        feedback = feedback.filter(trace_id__in=list(trace_pks))
    if feedback_after:
        feedback = feedback.filter(pk__gt=feedback_after)
    if feedback_upto is not None:
        feedback = feedback.filter(pk__lte=feedback_upto)
    rows = list(
        feedback
        .filter(Q(verdict=Feedback.Verdict.FAIL) | ~Q(issues=[]))
        .order_by("trace_id", "judge", "target_span_id", "pk")
        .values("pk", "trace_id", "trace__trace_id", "trace__release", "target_span_id", "judge", "judge_kind",
                "verdict", "score", "critique", "issues", "rubric__node", "details__node")
    )
    corrected = corrected_keys(project_id=run.project_id)
    cited = {(r["trace_id"], str(e.get("span_id") or "")) for r in rows for i in (r["issues"] or [])
             if isinstance(i, dict) and r["judge"].startswith("rule.")
             for e in i.get("evidence") or [] if isinstance(e, dict) and e.get("span_id")}
    nodes = _span_nodes({(r["trace_id"], r["target_span_id"]) for r in rows if r["target_span_id"]} | cited,
                        project_id=run.project_id)
    drafts: list[Draft] = []
    for row in rows:
        target = row["target_span_id"] or ""
        if (row["trace_id"], row["judge"], target) in corrected:
            continue
        node, started = nodes.get((row["trace_id"], target), ("", None, ""))[:2] if target else \
            (row["rubric__node"] or "", None)
        if target and isinstance(row["details__node"], str) and row["details__node"]:
            node = row["details__node"]  # the judges' view of a tool call: its caller's node
        issues = [i for i in (row["issues"] or []) if isinstance(i, dict) and (i.get("title") or i.get("detail"))]
        seen: set[str] = set()

        def add(kind: str, text: str, severity: str, evidence: list[dict], title: str = "", tool: str = "",
                pattern: str = "") -> None:
            norm = normalize_text(text)
            if not norm or norm in seen:
                return
            seen.add(norm)
            drafts.append(Draft(
                feedback_id=row["pk"], trace_pk=row["trace_id"], trace_id=row["trace__trace_id"],
                release=row["trace__release"] or "", position=len(seen) - 1, kind=kind, text=text[:4000], node=node,
                span_id=target, judge=row["judge"], severity=severity if severity in SEVERITY_RANK else "medium",
                evidence=evidence, title=title, started=started, tool=tool, pattern=pattern,
            ))

        for issue in issues:
            evidence = [{"span_id": str(e.get("span_id") or ""), "quote": str(e.get("quote") or "")}
                        for e in issue.get("evidence") or [] if isinstance(e, dict) and e.get("span_id")]
            title = " ".join(str(issue.get("title") or "").split())
            pattern = _rule_pattern(row["judge"], title) if target else ""
            add("issue", issue_text(title, str(issue.get("detail") or "")), str(issue.get("severity") or "medium"),
                evidence, title, _tool_of(row["trace_id"], target, evidence, nodes) if pattern else "", pattern)
        if row["verdict"] == Feedback.Verdict.FAIL and (row["judge_kind"] == "llm" or not issues):
            top = max((SEVERITY_RANK.get(str(i.get("severity")), 1) for i in issues), default=None)
            severity = next(k for k, v in SEVERITY_RANK.items() if v == top) if top is not None else \
                _severity_of_score(row["score"])
            cited = [{"span_id": target, "quote": ""}] if target else []
            for sentence in split_critique(row["critique"] or ""):
                add("critique", sentence, severity, cited)
    return drafts
