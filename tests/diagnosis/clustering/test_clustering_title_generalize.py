"""Pattern titles name the pattern, not one occurrence: instance values become placeholders, names stay."""

import numpy as np
import pytest

from diagnosis.clustering.cluster import Cluster
from diagnosis.clustering.naming import name_clusters, title_generalize


@pytest.mark.parametrize("title, expected", [
    # The support desk's rule and rubric titles (README's demo insights).
    ("O-5012 from track_shipment is missing from chat gpt-4o-mini (mediator)",
     "<id> from track_shipment is missing from chat gpt-4o-mini (mediator)"),
    ("invoice_lookup called 5 times with identical arguments",
     "invoice_lookup called N times with identical arguments"),
    ("chat gpt-4o (planner): tokens 202 tokens is far above the node's median",
     "chat gpt-4o (planner): N tokens is far above the node's median"),
    # ids of every shape
    ("INV-9011 is not in the answer", "<id> is not in the answer"),
    ("ORD_77 and ORD12345 were dropped", "<id> were dropped"),
    ("trace 4bf92f3577b34da6a3ce929d0e0e4736 span 00f067aa0ba902b7 failed", "trace <id> span <id> failed"),
    ("record 123e4567-e89b-12d3-a456-426614174000 missing", "record <id> missing"),
    ("order #123 refunded 2 times", "order <id> refunded N times"),
    ("O-1, O-2 and O-3 are missing from the reply", "<id> are missing from the reply"),
    # quoted values and numbers
    ("Answered 'Paris' instead of \"London\"", 'Answered "…" instead of "…"'),
    ("latency 1,200 ms after 3.5 s", "latency N ms after N s"),
    ("HTTP 429 from the billing API.", "HTTP N from the billing API."),
])
def test_instance_values_become_placeholders(title, expected):
    assert title_generalize(title) == expected


@pytest.mark.parametrize("title", [
    "execute_tool invoice_lookup (billing_worker) failed: RateLimitedError",
    "order_lookup is called although it never should be",
    "chat gpt-4o-mini and claude-3-5-sonnet disagree in app.py on v2",
    "The node's median and the agent's answer differ",  # apostrophes are not quotes
    "Forbidden text in chat gpt-4o, violating “Refund requests are routed to billing”",  # Clear's own quotes
    "deadbeef is a word here, cafe too",  # hex-looking words without a digit
])
def test_names_stay(title):
    assert title_generalize(title) == title


def test_idempotent():
    once = title_generalize("O-5012 and 'x' from track_shipment, 3 times")
    assert title_generalize(once) == once


def test_offline_cluster_names_are_generalised():
    cluster = Cluster(id="c0", level="node", node="billing_worker", member_ids=["a", "b"], centroid=np.ones(2),
                      medoid_id="a", size=2, distinct_count=2, cohesion=1.0, example_ids=["a", "b"],
                      trace_ids=["t1", "t2"], nodes={"billing_worker": 2})
    texts = {"a": "invoice_lookup called 5 times with identical arguments",
             "b": "invoice_lookup called 4 times with identical arguments"}
    name = name_clusters([cluster], texts)["c0"]
    assert name.title == "invoice_lookup called N times with identical arguments"
