"""Identity that holds (issue 39, item 2): a build never makes a new insight of statements open insights hold already,
and never leaves two open insights with one level, node and title.

Why: the same trace is often judged by more than one run (the demo's full run, then the day's continuous run that
claims the same traces). Each run clusters its own statements, and its clusters' centroids differ from the insights'
when its judges differ (a continuous run has no contrastive judge): the planner's routing statements, held by the
contrastive insight at `planner`, formed a cluster of their own there whose centroid was below the identity threshold,
so the continuous run's first refresh made a new insight of them, named after their medoid: a second row titled as
the misroute's system insight.

So, after identity matching (identity.py) and sticky membership (sticky.py):

* A statement is the same one when its trace, node and canonical text (vector key) are; it is held by the insight
  a writing run last placed it in at that level, followed through merges, when that insight is titled (not an
  "other" bucket) and open or acknowledged.
* A statement this clustering leaves in an "other" bucket goes to the open, titled insight that holds it.
* A group that would become a new insight and whose statements were all seen before goes to the insights that hold
  them; what no open, titled insight holds (an "other" bucket's, a fixed insight's) goes to the "other" bucket of its
  level and node, as sticky.py does within a run. A group with one statement never seen stays new: that statement
  is new. (A one-time rebuild that must change insights is a merge into successors, not a new build: exempt.)
* After naming, a group that would become a new insight with the title of an open insight of its level and node
  joins that insight, and two new groups with one title are one insight (groups_title_pool). What a rename leaves
  duplicated is merged by the build afterwards (services/insights.py `_duplicates_merge`).
"""

from __future__ import annotations

from diagnosis.insights.identity import Group
from diagnosis.insights.statements import Draft
from diagnosis.models import DiagnosisRun, Insight, InsightStatement, RunTrace

OPEN = (Insight.Status.OPEN, Insight.Status.ACKNOWLEDGED)
# per row and level (node, system): the open, titled insight that holds it; 0: seen before, held by none; None: new
Held = list[tuple[int | None, int | None]]


def _live_open(project_id: int) -> dict[int, int]:
    """Insight id -> the open, titled insight it stands for now (merges followed); absent: it holds nothing."""
    rows = {pk: (merged, status, other) for pk, merged, status, other in Insight.objects.filter(
        project_id=project_id).values_list("pk", "merged_into_id", "status", "is_other")}
    out = {}
    for pk in rows:
        final, seen = pk, set()
        while rows[final][0] in rows and final not in seen:
            seen.add(final)
            final = rows[final][0]
        if rows[final][1] in OPEN and not rows[final][2]:
            out[pk] = final
    return out


def held_places(*, run: DiagnosisRun, drafts: list[Draft], keys: list[str]) -> Held:
    """Where writing runs other than this one last placed each draft's statement (module docstring)."""
    if not drafts:
        return []
    live = _live_open(run.project_id)
    placed = (InsightStatement.objects.filter(project_id=run.project_id, excluded=False,
                                              trace_id__in=RunTrace.objects.filter(run=run).values("trace_id"))
              .exclude(run=run).order_by("-pk")
              .values_list("trace_id", "node", "vector_key", "node_insight_id", "system_insight_id"))
    found: dict[tuple, list[int | None]] = {}
    for trace, node, key, node_insight, system_insight in placed.iterator(chunk_size=5000):
        place = found.setdefault((trace, node, key), [None, None])
        # newest placement first: an older one fills only a level the newer left empty
        if place[0] is None:
            place[0] = live.get(node_insight)
        if place[1] is None:
            place[1] = live.get(system_insight)
    out: Held = []
    for draft, key in zip(drafts, keys):
        place = found.get((draft.trace_pk, draft.node[:300], key))
        out.append((place[0] or 0, place[1] or 0) if place else (None, None))
    return out


def groups_held(*, groups: list[Group], held: Held) -> list[Group]:
    """The groups with each would-be new group whose statements were all seen given to the insights that hold them
    (pooled with a group of the same insight when there is one) and to its "other" bucket (module docstring)."""
    if not any(p is not None for place in held for p in place):
        return groups
    out: list[Group] = []
    slot: dict[tuple, Group] = {}
    for group in groups:
        if group.is_other:
            slot.setdefault((group.level, group.node, "other"), group)
        elif group.insight_id is not None:
            slot.setdefault((group.level, group.insight_id), group)
    for group in groups:
        position = 0 if group.level == Insight.Level.NODE else 1
        places = [held[r][position] for r in group.rows]
        if group.is_other and any(places):
            # what this clustering leaves unclustered stays with the open insight another run placed it in
            for insight_id in sorted({p for p in places if p}):
                target = slot.get((group.level, insight_id))
                if target is None:
                    target = slot[(group.level, insight_id)] = Group(group.level, group.node, [], insight_id, False,
                                                                     "held", 1.0, [])
                    out.append(target)
                target.rows = sorted(set(target.rows) | {r for r, p in zip(group.rows, places) if p == insight_id})
            group.rows = [r for r, p in zip(group.rows, places) if not p]
        if group.is_other and group.level != Insight.Level.NODE:
            # at system level, a statement an open node insight holds is explained there (as a full build leaves it)
            group.rows = [r for r in group.rows if not (held[r][0] and not held[r][1])]
        if group.is_other and not group.rows:
            continue
        if group.is_other or group.insight_id is not None or not group.rows or None in places:
            out.append(group)
            continue
        for insight_id in sorted(set(places)):
            rows = [r for r, p in zip(group.rows, places) if p == insight_id]
            key = (group.level, group.node, "other") if insight_id == 0 else (group.level, insight_id)
            target = slot.get(key)
            if target is None:
                target = slot[key] = Group(group.level, group.node, [], insight_id or None, insight_id == 0,
                                           "other" if insight_id == 0 else "held", 0.0 if insight_id == 0 else 1.0,
                                           [] if insight_id == 0 else list(group.clusters))
                out.append(target)
            target.rows = sorted(set(target.rows) | set(rows))
    return [g for g in out if not g.is_other] + [g for g in out if g.is_other]


def groups_title_pool(*, project_id: int, groups: list[Group], names: dict[int, tuple]
                      ) -> tuple[list[Group], dict[int, tuple]]:
    """groups and their names (groups_name) with each would-be new group titled as an open insight of its level and
    node joined to it, and new groups of one title joined to each other. Indices are renumbered."""
    existing = {}
    for pk, level, node, title in Insight.objects.filter(
            project_id=project_id, is_other=False, merged_into__isnull=True, status__in=OPEN) \
            .order_by("pk").values_list("pk", "level", "node", "title"):
        existing.setdefault((level, node, title), pk)
    slots: list[tuple] = []
    for index, group in enumerate(groups):
        if group.is_other or index not in names:
            slots.append(("index", index))
        elif group.insight_id is not None:
            slots.append(("insight", group.level, group.insight_id))
        else:
            title = (group.level, group.node, names[index][1].title[:300])
            found = existing.get(title)
            slots.append(("insight", group.level, found) if found is not None else ("title", *title))
    if len(set(slots)) == len(slots):
        return groups, names
    out: list[Group] = []
    out_names: dict[int, tuple] = {}
    first: dict[tuple, int] = {}
    for index, (group, slot) in enumerate(zip(groups, slots)):
        at = first.get(slot)
        if at is None:
            first[slot] = len(out)
            if slot[0] == "insight" and group.insight_id is None:
                group = Group(group.level, group.node, list(group.rows), slot[2], False, "title", group.similarity,
                              list(group.clusters))
            if index in names:
                out_names[len(out)] = names[index]
            out.append(group)
            continue
        out[at].rows = sorted(set(out[at].rows) | set(group.rows))
        out[at].clusters.extend(group.clusters)
    return out, out_names
