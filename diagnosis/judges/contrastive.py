"""The contrastive judge: features that separate a run's failing traces from its succeeding ones.

Unlike the other judges it looks at all the traces of a run together, and only at their recorded outcomes
(`Trace.outcome`); it needs no model and is deterministic. For every feature of diagnosis/judges/contrastive_features.py:

1. a 2×2 table, feature present/absent × trace failed/succeeded, over the traces with a known outcome;
2. tested only when it is present in at least `min_support` failing traces and more frequent in failing traces than
   in succeeding ones (odds ratio > 1). Features present in exactly the same traces are one hypothesis (one test);
3. Fisher's exact test, one-sided (enrichment in failures), then Benjamini–Hochberg across all hypotheses tested;
   those with q ≤ `fdr` are findings;
4. redundancy: of features holding in the same traces, the most specific kind (KIND_ORDER) names the finding, then
   the one that shows first in the trace (the upstream node, not the ones its mistake reaches); then, strongest
   first, each finding is tested again on the failing traces that no stronger finding explains, and dropped when
   it is no longer significant there (a narrower, downstream or broader view of a pattern already reported).

Each finding is one statement with its numbers ("fails 100% vs 32% when `invoice_lookup` is called 3+ times with
identical arguments"), attributed to the node where the feature shows, and becomes one failing result per failing
trace that carries it, citing that trace's spans (`contrastive_results`): an issue titled "Fails more often when …"
(the pattern; insights are named after it) whose detail carries the numbers. A succeeding trace that carries it
gets a passing result with the same issue at low severity, so the finding's insight counts it too.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from diagnosis.judges.contract import Evidence, JudgeIssue, JudgeResult, TraceView
from diagnosis.judges.contrastive_features import Hit, run_features

CONTRASTIVE_JUDGE = "contrastive"
# 2: succeeding traces with a finding's feature get a passing result carrying it (insights count them).
CONTRASTIVE_VERSION = "contrastive-2"
MIN_SUPPORT = 3  # failing traces a feature must be present in to be tested
MIN_OUTCOMES = 3  # failing and succeeding traces each, below which the judge does not run
# Benjamini–Hochberg level. 0.1, the usual level of an exploratory screen: a fault that fails 4 of 44 traces and
# no succeeding one cannot reach p < 0.02 (Fisher), so 0.05 across tens of hypotheses would miss it.
FDR = 0.1
SUGGESTIVE = 5  # hypotheses shown as suggestive when none passes the correction


@dataclass
class Finding:
    key: str
    kind: str
    node: str
    phrase: str
    failing_with: int  # failing traces with the feature
    succeeding_with: int
    failing_total: int
    succeeding_total: int
    odds_ratio: float
    p_value: float
    q_value: float = 1.0
    traces: frozenset[str] = frozenset()  # every trace (failing or not) with the feature
    evidence: dict[str, list[Evidence]] = field(default_factory=dict)  # failing trace id -> spans carrying it
    evidence_succeeding: dict[str, list[Evidence]] = field(default_factory=dict)  # the same, succeeding traces
    notes: dict[str, list[str]] = field(default_factory=dict)  # trace id -> what it is there (general phrases)
    equivalent: list[str] = field(default_factory=list)  # keys of features present in exactly the same traces

    @property
    def rate_with(self) -> float:
        """Failure rate of the traces with the feature."""
        return self.failing_with / max(1, self.failing_with + self.succeeding_with)

    @property
    def rate_without(self) -> float:
        without = self.failing_total - self.failing_with + self.succeeding_total - self.succeeding_with
        return (self.failing_total - self.failing_with) / max(1, without)

    @property
    def statement(self) -> str:
        return f"fails {self.rate_with:.0%} vs {self.rate_without:.0%} when {self.phrase}"

    @property
    def title(self) -> str:
        """The issue's title: the pattern without its numbers, which change from run to run (an insight is named
        after it)."""
        return f"Fails more often when {self.phrase}"

    @property
    def detail(self) -> str:
        return (f"{self.statement}; in {self.failing_with} of {self.failing_total} failing and "
                f"{self.succeeding_with} of {self.succeeding_total} succeeding traces (Fisher p={self.p_value:.2g}, "
                f"Benjamini–Hochberg q={self.q_value:.2g})")

    def as_dict(self) -> dict:
        return {"feature": self.key, "node": self.node, "statement": self.statement, "failing_with": self.failing_with,
                "failing_total": self.failing_total, "succeeding_with": self.succeeding_with,
                "succeeding_total": self.succeeding_total, "odds_ratio": _finite(self.odds_ratio),
                "p_value": self.p_value, "q_value": self.q_value}


@dataclass
class ContrastiveReport:
    status: str  # "ok" | "skipped"
    reason: str = ""
    failing: int = 0
    succeeding: int = 0
    features: int = 0  # distinct features seen
    tested: int = 0  # hypotheses tested (distinct trace sets passing support and direction)
    findings: list[Finding] = field(default_factory=list)
    # When no hypothesis passes the correction: the strongest few, by effect, with their p and q. Shown, never
    # written as feedback (they are not findings).
    suggestive: list[Finding] = field(default_factory=list)

    def as_dict(self) -> dict:
        return {"status": self.status, "reason": self.reason, "failing": self.failing, "succeeding": self.succeeding,
                "features": self.features, "tested": self.tested, "findings": [f.as_dict() for f in self.findings],
                "suggestive": [f.as_dict() for f in self.suggestive], "version": CONTRASTIVE_VERSION}


def _fisher_exact(table: list[list[int]]) -> tuple[float, float]:
    """scipy's one-sided ("greater") Fisher exact test, imported on first use: scipy.stats takes 0.8 s to import,
    a third of the start of every web, worker and command process, most of which never judge."""
    from scipy.stats import fisher_exact

    odds, p = fisher_exact(table, alternative="greater")
    return odds, p


def _finite(value: float) -> float | None:
    return value if math.isfinite(value) else None


def benjamini_hochberg(p_values: list[float]) -> list[float]:
    """Adjusted p-values (q-values) of the Benjamini–Hochberg step-up procedure, in the input's order."""
    m = len(p_values)
    order = sorted(range(m), key=lambda i: p_values[i])
    adjusted = [1.0] * m
    running = 1.0
    for rank in range(m, 0, -1):
        index = order[rank - 1]
        running = min(running, p_values[index] * m / rank)
        adjusted[index] = min(1.0, running)
    return adjusted


@dataclass
class _Candidate:
    traces: frozenset[str]
    hits: dict[str, dict[str, Hit]] = field(default_factory=dict)  # key -> trace id -> hit


def _pick(candidate: _Candidate) -> str:
    """The key that names a group of features holding in the same traces: most specific kind, then shows first."""
    def order(key: str):
        hits = candidate.hits[key]
        any_hit = next(iter(hits.values()))
        return any_hit.rank, sum(h.started for h in hits.values()) / len(hits), key
    return min(candidate.hits, key=order)


def contrastive_findings(traces: list[TraceView], *, min_support: int = MIN_SUPPORT, fdr: float = FDR,
                         min_outcomes: int = MIN_OUTCOMES) -> ContrastiveReport:
    """The features significantly more frequent in failing traces (see the module docstring)."""
    known = [t for t in traces if t.outcome in ("success", "failure")]
    failing = frozenset(t.trace_id for t in known if t.outcome == "failure")
    succeeding = frozenset(t.trace_id for t in known if t.outcome == "success")
    report = ContrastiveReport(status="ok", failing=len(failing), succeeding=len(succeeding))
    if len(failing) < min_outcomes or len(succeeding) < min_outcomes:
        report.status = "skipped"
        report.reason = (f"needs at least {min_outcomes} failing and {min_outcomes} succeeding traces with a "
                         f"recorded outcome; the run has {len(failing)} failing and {len(succeeding)} succeeding"
                         + (f" ({len(traces) - len(known)} without an outcome)" if len(known) < len(traces) else ""))
        return report
    features = run_features(known)
    by_key: dict[str, dict[str, Hit]] = {}
    for trace_id, hits in features.items():
        for key, hit in hits.items():
            by_key.setdefault(key, {})[trace_id] = hit
    report.features = len(by_key)
    groups: dict[frozenset[str], _Candidate] = {}
    for key, hits in by_key.items():
        present = frozenset(hits)
        a, b = len(present & failing), len(present & succeeding)
        if a < min_support or a * len(succeeding) <= b * len(failing):  # support, then odds ratio > 1
            continue
        groups.setdefault(present, _Candidate(traces=present)).hits[key] = hits
    candidates = list(groups.values())
    tables = []
    for candidate in candidates:
        a, b = len(candidate.traces & failing), len(candidate.traces & succeeding)
        table = [[a, b], [len(failing) - a, len(succeeding) - b]]
        odds, p = _fisher_exact(table)
        tables.append((a, b, float(odds), float(p)))
    report.tested = len(candidates)
    q_values = benjamini_hochberg([p for *_, p in tables])
    def finding(candidate: _Candidate, a: int, b: int, odds: float, p: float, q: float) -> Finding:
        key = _pick(candidate)
        hits = candidate.hits[key]
        first = next(iter(hits.values()))
        return Finding(
            key=key, kind=first.kind, node=first.node, phrase=first.phrase, failing_with=a, succeeding_with=b,
            failing_total=len(failing), succeeding_total=len(succeeding), odds_ratio=odds, p_value=p, q_value=q,
            traces=candidate.traces, evidence={t: hits[t].evidence for t in sorted(candidate.traces & failing)},
            evidence_succeeding={t: hits[t].evidence for t in sorted(candidate.traces & succeeding)},
            notes={t: hits[t].notes for t in sorted(candidate.traces) if hits[t].notes},
            equivalent=sorted(k for k in candidate.hits if k != key))

    found = [finding(candidate, *table, q) for candidate, table, q in zip(candidates, tables, q_values) if q <= fdr]
    cutoff = max((f.p_value for f in found), default=0.0)  # the largest p-value the BH step-up accepted
    report.findings = _explain_away(found, failing=failing, succeeding=succeeding, min_support=min_support,
                                    cutoff=cutoff)
    if not report.findings:
        strongest = sorted(zip(candidates, tables, q_values),
                           key=lambda row: (-_effect(row[1][0], row[1][1], len(failing), len(succeeding)),
                                            row[1][3]))
        report.suggestive = [finding(candidate, *table, q) for candidate, table, q in strongest[:SUGGESTIVE]]
    return report


def _effect(a: int, b: int, failing: int, succeeding: int) -> float:
    """Risk difference: how much more often traces with the feature fail than traces without it."""
    with_ = a / max(1, a + b)
    without = (failing - a) / max(1, failing - a + succeeding - b)
    return with_ - without


def _explain_away(findings: list[Finding], *, failing: frozenset[str], succeeding: frozenset[str],
                  min_support: int, cutoff: float) -> list[Finding]:
    """Strongest first, each finding is tested again on the failing traces no kept finding carries: a narrower or
    downstream view of a kept pattern (its failures are all explained already), or a broad feature that is
    significant only through the failures of kept patterns, is dropped. Two faults that always occur in the
    same traces are therefore reported as one."""
    kept: list[Finding] = []
    explained: set[str] = set()
    for finding in sorted(findings, key=lambda f: (f.p_value, -f.rate_with, f.key)):
        rest = failing - explained
        a = len(finding.traces & rest)
        b = len(finding.traces & succeeding)
        if a < min_support or a * len(succeeding) <= b * len(rest):
            continue
        if explained:
            _, p = _fisher_exact([[a, b], [len(rest) - a, len(succeeding) - b]])
            if p > cutoff:
                continue
        kept.append(finding)
        explained |= finding.traces & failing
    return kept


def contrastive_results(report: ContrastiveReport) -> dict[str, list[JudgeResult]]:
    """trace id -> the results of its findings: one per span a finding targets in that trace (its first evidence span,
    at the finding's node); findings targeting the same span share one result. A failing trace's result fails; a
    succeeding trace that has the feature too gets a passing result with the same issue at low severity, so the
    insight the finding becomes counts the succeeding traces it shows in (its lift and its failing / succeeding
    counts are the finding's, not failures only)."""
    by_trace: dict[str, dict[str, JudgeResult]] = {}
    for finding in report.findings:
        severity = "high" if finding.rate_with >= 0.8 else "medium"
        carriers = [(trace_id, evidence, True) for trace_id, evidence in finding.evidence.items()]
        carriers += [(trace_id, evidence, False) for trace_id, evidence in finding.evidence_succeeding.items()]
        for trace_id, evidence, failed in carriers:
            if not evidence:
                continue
            target = evidence[0].span_id
            results = by_trace.setdefault(trace_id, {})
            result = results.get(target)
            if result is None:
                result = results[target] = JudgeResult(
                    judge=CONTRASTIVE_JUDGE, target_span_id=target, status="ok", score=0.0 if failed else 1.0,
                    verdict="fail" if failed else "pass",
                    critique="Features more frequent in failing traces than in succeeding ones." if failed else
                    "Features more frequent in failing traces than in succeeding ones; this trace has them and "
                    "succeeded.", prompt_version=CONTRASTIVE_VERSION,
                    # The finding's node, as the judges saw its span (insights/statements.py: a tool recorded as a
                    # plain span is stored at its own name).
                    details={"findings": [], "node": finding.node})
            notes = finding.notes.get(trace_id)
            detail = finding.detail + (f"; in this trace: {', '.join(notes)}" if notes else "")
            result.issues.append(JudgeIssue(title=finding.title, detail=detail, severity=severity if failed else "low",
                                            evidence=[Evidence(e.span_id, e.quote) for e in evidence]))
            result.details["findings"].append(finding.as_dict())
    return {trace_id: list(results.values()) for trace_id, results in by_trace.items()}
