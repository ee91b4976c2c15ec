from diagnosis.clustering.cluster import cluster_statements
from diagnosis.clustering.naming import ClusterName, distinctive_terms, name_clusters, shorten
from diagnosis.clustering.pipeline import analyse


def test_distinctive_terms_prefer_cluster_specific_words():
    terms = distinctive_terms([
        [("The agent invented a refund policy.", 2), ("The refund policy was made up by the agent.", 1)],
        [("The agent repeated the same search query.", 1), ("Identical search queries repeated in a loop.", 1)],
    ], top=3)
    assert terms[0][0] in {"refund policy", "refund", "policy"}
    assert "search" in " ".join(terms[1]) and "agent" not in terms[1]


def test_shorten():
    assert shorten("The agent never looked up the order before answering questions about its status.") == (
        "Never looked up the order before answering questions about its status")
    long = "It " + "very " * 40 + "long."
    out = shorten(long, 40)
    assert len(out) <= 40 and out.endswith("\u2026")
    # A cut never leaves half a `code` span.
    finding = "Fails more often when `planner` writes `intent: refund` with `worker: orders_worker`"
    assert shorten(finding) == "Fails more often when `planner` writes `intent: refund` with\u2026"


def test_offline_names_come_from_medoid_and_terms(paraphrases):
    statements, _, vectors = paraphrases
    result = cluster_statements(statements, vectors)
    texts = {s.id: s.text for s in statements}
    names = name_clusters(result.clusters, texts)
    assert set(names) == {c.id for c in result.clusters}
    for c in result.clusters:
        name = names[c.id]
        assert name.source == "offline" and name.terms and name.title
        assert name.title[:20].lower().strip() in texts[c.medoid_id].lower() or len(name.title) <= 80
        assert str(c.size) in name.description
    all_titles = " ".join(n.title.lower() + " " + " ".join(n.terms) for n in names.values())
    for word in ("refund", "order", "date", "search", "human", "language"):
        assert word in all_titles


def test_llm_hook_used_and_failures_fall_back(paraphrases):
    statements, _, vectors = paraphrases
    result = cluster_statements(statements, vectors)
    texts = {s.id: s.text for s in statements}
    seen = []

    def namer(request):
        seen.append(request)
        if len(seen) == 1:
            return ClusterName(title="LLM title", description="LLM description", root_cause="rc",
                               recommendation="fix it")
        if len(seen) == 2:
            raise RuntimeError("LLM down")
        return None

    names = name_clusters(result.clusters, texts, llm=namer)
    first, second = result.clusters[0], result.clusters[1]
    assert names[first.id].title == "LLM title" and names[first.id].source == "llm"
    assert names[first.id].recommendation == "fix it" and names[first.id].terms  # offline terms kept
    assert names[second.id].source == "offline"
    assert seen[0].medoid_text == texts[first.medoid_id] and seen[0].example_texts


def test_analyse_end_to_end(paraphrases, embedder):
    statements, _, _ = paraphrases
    analysis = analyse(statements, embedder)
    node_clusters, system_clusters, links = analysis.clustering
    ids = {c.id for c in system_clusters} | {c.id for cs in node_clusters.values() for c in cs}
    assert set(analysis.names) == ids == set(analysis.fingerprints)
    assert analysis.vectors.shape == (len(statements), 384)
