"""Sticky membership: how a continuous refresh's re-clustering keeps the insights it found before (issue 27).

A refresh re-clusters a window that slides: a trace leaves, a few arrive. The clustering of a slightly different set
is slightly different (its micro-clusters and cuts move), and matching the new clusters to insights by centroid alone
moved ~8% of the statements a full build had placed into other insights or into new ones on 50,000 traces; a window
one trace smaller opened tickets and sent `insight.created` for patterns that already had an insight. So, in a
refresh's re-clustering only (a full run's build is unchanged):

* A statement the previous re-clustering placed in an insight (`confirmed`) stays in that insight (merges followed),
  also when the clustering now leaves it out at that level; the clustering moves it only out of the "other" bucket,
  never between named insights nor out of one.
* A statement placed since (joined by an incremental refresh, or not yet seen) goes where its group's confirmed
  statements are: the insight most of them are in, when they are at least half the group; else where identity
  matching put the group (an existing insight, a new one, or "other"). An "other" bucket is no group: what it holds
  has nothing in common, so its new statements stay in it (the demo's mediator statement followed the two misroute
  statements of a five-trace window into the misroute's system insight, and the mediator's node insight with it).
* A new insight is made only from a group holding at least one statement the previous re-clustering did not see, so
  a slide that only drops traces, or reshuffles "other", creates nothing.
"""

from __future__ import annotations

from collections import Counter

from diagnosis.insights.identity import Group

Prior = dict[str, tuple[int | None, int | None]]  # draft key -> (node insight, system insight) at the last clustering


def groups_sticky(*, groups: list[Group], keys: list[str], nodes: list[str], prior: Prior,
                  live: dict[int, int]) -> list[Group]:
    """groups: groups_assign's answer for the window; keys, nodes: each row's draft key and node; prior: every
    statement the previous re-clustering saw, with its places ("other" buckets included: they hold no one here);
    live: insight id -> the insight it resolves to now (merges followed; an insight absent here, such as an "other"
    bucket, holds no statement). Returns the groups to write."""
    out: dict[tuple, Group] = {}
    order: list[tuple] = []
    node_of_row: dict[int, int] = {}

    def put(group: Group, insight_id: int | None, rows: list[int], *, other: bool, via: str, index: int) -> None:
        slot = (group.level, group.node, "other" if other else insight_id if insight_id is not None else f"new{index}")
        target = out.get(slot)
        if target is None:
            target = out[slot] = Group(group.level, group.node, [], insight_id, other, via, group.similarity,
                                       list(group.clusters))
            order.append(slot)
        target.rows.extend(rows)
        if group.level == "node" and insight_id is not None and not other:
            node_of_row.update((r, insight_id) for r in rows)

    def held_at(row: int, position: int) -> int | None:
        place = prior.get(keys[row])
        return live.get(place[position]) if place and place[position] is not None else None

    def place(level: str, position: int, level_groups: list[Group], skip: set[int]) -> None:
        for index, group in enumerate(level_groups):
            rows = [r for r in group.rows if r not in skip]
            held = {r: i for r in rows if (i := held_at(r, position)) is not None}
            for insight_id in sorted(set(held.values())):
                put(group, insight_id, [r for r, i in held.items() if i == insight_id], other=False, via="kept",
                    index=index)
            rest = [r for r in rows if r not in held]
            if not rest:
                continue
            if held and 2 * len(held) >= len(rows) and not group.is_other:
                put(group, Counter(held.values()).most_common(1)[0][0], rest, other=False, via="kept", index=index)
            elif group.is_other or group.insight_id is not None:
                put(group, group.insight_id, rest, other=group.is_other, via=group.via, index=index)
            elif any(keys[r] not in prior for r in rest):
                put(group, None, rest, other=False, via="new", index=index)
            else:  # nothing new in it: what the last re-clustering left in "other" stays there
                put(group, None, rest, other=True, via="other", index=index)
        # A statement the clustering now leaves out at this level (no group, not even "other": at system level, one
        # whose node cluster joins no problem) keeps its place there too.
        covered = {r for g in level_groups for r in g.rows}
        for row in range(len(keys)):
            insight_id = held_at(row, position) if row not in covered and row not in skip else None
            if insight_id is not None:
                put(Group(level, nodes[row] if level == "node" else "", []), insight_id, [row], other=False,
                    via="kept", index=-1)

    place("node", 0, [g for g in groups if g.level == "node"], set())
    # System problems are made of node clusters (clustering/problems.py): a new statement of a node insight whose
    # statements kept their system place goes where most of them are (or nowhere at system level), as
    # incremental.py joins it between re-clusterings.
    votes: dict[int, Counter] = {}
    for row, insight_id in node_of_row.items():
        if keys[row] in prior:
            votes.setdefault(insight_id, Counter())[held_at(row, 1)] += 1
    follow = {r: votes[i].most_common(1)[0][0] for r, i in node_of_row.items()
              if keys[r] not in prior and i in votes}
    place("system", 1, [g for g in groups if g.level != "node"], set(follow))
    for row, insight_id in follow.items():
        if insight_id is not None:
            put(Group("system", "", []), insight_id, [row], other=False, via="kept", index=-1)
    result = [out[slot] for slot in order]
    for group in result:
        group.rows = sorted(set(group.rows))
        if group.insight_id is not None and group.via == "kept":
            original = next((g for g in groups if g.insight_id == group.insight_id and g.level == group.level), None)
            if original is not None:
                group.via, group.similarity = original.via, original.similarity
    return [g for g in result if not g.is_other] + [g for g in result if g.is_other]
