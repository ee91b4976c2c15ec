"""Sticky membership of a continuous refresh's re-clustering (diagnosis/insights/sticky.py): what a window that
slides may and may not change."""

from diagnosis.insights.identity import Group
from diagnosis.insights.sticky import groups_sticky

KEYS = [f"f{i}:0" for i in range(8)]
NODES = ["a"] * 8


def _by_insight(groups, level):
    return {(g.insight_id, g.is_other): g.rows for g in groups if g.level == level}


def test_placed_statements_keep_their_insight_and_new_ones_follow_the_majority():
    # The clustering moved rows 0-2 (placed in insight 10) into a cluster it matched to insight 11, with new row 3.
    groups = [Group("node", "a", [0, 1, 2, 3], 11, via="centroid"), Group("node", "a", [4, 5], 11, via="centroid")]
    prior = {KEYS[i]: (10, None) for i in range(3)} | {KEYS[4]: (11, None), KEYS[5]: (11, None)}
    out = groups_sticky(groups=groups, keys=KEYS, nodes=NODES, prior=prior, live={10: 10, 11: 11})
    assert _by_insight(out, "node") == {(10, False): [0, 1, 2, 3], (11, False): [4, 5]}


def test_a_new_insight_needs_a_statement_the_last_clustering_did_not_see():
    seen_in_other = {KEYS[i]: (99, None) for i in range(4)}  # 99: an "other" bucket, not live
    groups = [Group("node", "a", [0, 1, 2], None), Group("node", "a", [3, 6], None)]
    out = groups_sticky(groups=groups, keys=KEYS, nodes=NODES, prior=seen_in_other, live={})
    by = {(tuple(g.rows), g.insight_id, g.is_other) for g in out}
    assert ((0, 1, 2), None, True) in by  # only reshuffled "other" statements: no new insight
    assert ((3, 6), None, False) in by  # row 6 is new: this group may become an insight


def test_merges_are_followed_and_left_out_statements_keep_their_place():
    prior = {KEYS[0]: (10, 20), KEYS[1]: (10, 20), KEYS[2]: (10, 20)}
    groups = [Group("node", "a", [0, 1], 10)]  # row 2 left out at node level, all three at system level
    out = groups_sticky(groups=groups, keys=KEYS, nodes=NODES, prior=prior, live={10: 12, 12: 12, 20: 20})
    assert _by_insight(out, "node") == {(12, False): [0, 1, 2]}
    assert _by_insight(out, "system") == {(20, False): [0, 1, 2]}


def test_a_new_node_statement_goes_where_its_node_insight_is_at_system_level():
    prior = {KEYS[0]: (10, 20), KEYS[1]: (10, 20), KEYS[2]: (10, None)}
    groups = [Group("node", "a", [0, 1, 2, 3], 10), Group("system", "", [0, 1], 21)]
    out = groups_sticky(groups=groups, keys=KEYS, nodes=NODES, prior=prior, live={10: 10, 20: 20, 21: 21})
    assert _by_insight(out, "system") == {(20, False): [0, 1, 3]}  # row 3 new: with 2 of its node insight's 3


def test_a_new_statement_in_other_does_not_follow_the_placed_ones_into_an_insight():
    """The demo's flake (test_continuous_reuse.py, one run in five): a five-trace window's system "other" bucket held
    the two misroute statements, placed in the misroute's system insight, and a new mediator statement; as a group's
    majority they took it into that insight, and the mediator's node insight was nested under the misroute from then
    on. "Other" is no group: its members have nothing in common."""
    nodes = ["planner", "orders_worker", "mediator"]
    prior = {KEYS[0]: (10, 30), KEYS[1]: (11, 30)}
    groups = [Group("node", "planner", [0], 10, via="held"), Group("node", "orders_worker", [1], 11, via="held"),
              Group("node", "mediator", [2], None, is_other=True, via="other"),
              Group("system", "", [0, 1, 2], None, is_other=True, via="other")]
    out = groups_sticky(groups=groups, keys=KEYS, nodes=nodes, prior=prior, live={10: 10, 11: 11, 30: 30})
    assert _by_insight(out, "system") == {(30, False): [0, 1], (None, True): [2]}
