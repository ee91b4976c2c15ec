import numpy as np

from diagnosis.clustering.cluster import cluster_statements
from diagnosis.clustering.identity import ClusterRef, InsightRef, fingerprint, match_clusters_to_insights
from diagnosis.clustering.statements import Statement

from .conftest import paraphrase_statements

NEW_PROBLEM = [
    "The agent quoted the price in US dollars although the store only sells in euros.",
    "Prices were converted to the wrong currency; the shop's catalogue is in EUR.",
    "It showed amounts in dollars instead of the customer's local currency, euros.",
    "The total was given in USD, but all orders on this store are billed in euros.",
]


def _majority(result, labels_by_id):
    out = {}
    for c in result.clusters:
        labs = [labels_by_id[i] for i in c.member_ids]
        out[c.id] = max(set(labs), key=labs.count)
    return out


def test_identity_is_stable_on_rerun_and_a_new_problem_is_new(embedder):
    statements, labels = paraphrase_statements()
    vectors = embedder.embed([s.text for s in statements])
    labels_by_id = dict(zip((s.id for s in statements), labels))
    first = cluster_statements(statements, vectors)
    insights = [InsightRef(f"insight-{i}", c.centroid, c.node, c.level) for i, c in enumerate(first.clusters)]
    problem_of_insight = {f"insight-{i}": p for i, p in enumerate(_majority(first, labels_by_id).values())}

    # run 2: another sample (the first paraphrase of every problem left out), reversed order, new statement
    # ids and traces, plus a problem never seen before
    keep = [i for i, s in enumerate(statements) if i == 0 or labels[i] != labels[i - 1]]
    rows = [i for i in range(len(statements)) if i not in keep][::-1]
    second_statements = [Statement(id=f"r2-{i}", text=statements[i].text, node=statements[i].node,
                                   trace_id=f"r2t{i}") for i in rows]
    second_vectors = vectors[rows]
    new = [Statement(id=f"new{i}", text=t, node="responder", trace_id=f"n{i}") for i, t in enumerate(NEW_PROBLEM)]
    second_statements += new
    second_vectors = np.vstack([second_vectors, embedder.embed(NEW_PROBLEM)])
    labels_by_id.update({f"r2-{i}": labels[i] for i in rows})
    labels_by_id.update({s.id: "currency" for s in new})
    second = cluster_statements(second_statements, second_vectors)

    mapping = match_clusters_to_insights(
        [ClusterRef(c.id, c.centroid, c.node, c.level) for c in second.clusters], insights)
    majority = _majority(second, labels_by_id)
    assert set(mapping) == {c.id for c in second.clusters}
    matched = [m.insight_id for m in mapping.values() if m.insight_id]
    assert len(matched) == len(set(matched))  # one-to-one
    for cluster_id, match in mapping.items():
        if majority[cluster_id] == "currency":
            assert match.insight_id is None and match.via == "new"
        else:
            assert match.via == "centroid" and match.similarity >= 0.8
            assert problem_of_insight[match.insight_id] == majority[cluster_id]
    assert sum(1 for m in mapping.values() if m.insight_id is None) == 1
    assert len(matched) == len(second.clusters) - 1 >= 5


def test_greedy_one_to_one_best_pair_first():
    a = np.array([1.0, 0.0, 0.0])
    b = np.array([0.9, 0.43589, 0.0])  # cos(a, b) = 0.9
    existing = [("old-a", a, "n", "node"), ("old-b", b, "n", "node")]
    # both new clusters are closest to old-a; the better one gets it, the other takes old-b
    new = [("x", np.array([0.97, 0.2431, 0.0]), "n", "node"), ("y", a, "n", "node")]
    m = match_clusters_to_insights(new, existing, threshold=0.8)
    assert m["y"].insight_id == "old-a" and m["x"].insight_id == "old-b"


def test_level_and_node_must_agree():
    v = np.array([0.0, 1.0])
    m = match_clusters_to_insights(
        [("c1", v, "planner", "node"), ("c2", v, "", "system")],
        [("i1", v, "responder", "node"), ("i2", v, "", "system")],
    )
    assert m["c1"].insight_id is None and m["c2"].insight_id == "i2"


def test_fingerprint_is_the_secondary_key():
    fp = fingerprint(["refund", "policy", "invented", "terms", "return", "extra"], "responder", "node")
    assert fp == fingerprint(["policy", "refund", "terms", "return", "invented"], "responder", "node")
    assert fp != fingerprint(["policy", "refund", "terms", "return", "invented"], "planner", "node")
    old = np.array([1.0, 0.0])
    drifted = np.array([0.7, 0.71414])  # cosine 0.7: below the centroid threshold, above the floor
    m = match_clusters_to_insights([ClusterRef("c", drifted, "responder", "node", fp)],
                                   [InsightRef("i", old, "responder", "node", fp)])
    assert m["c"].insight_id == "i" and m["c"].via == "fingerprint"
    far = np.array([0.0, 1.0])
    m = match_clusters_to_insights([ClusterRef("c", far, "responder", "node", fp)],
                                   [InsightRef("i", old, "responder", "node", fp)])
    assert m["c"].insight_id is None
