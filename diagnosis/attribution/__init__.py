"""Failure attribution (DESIGN §6, issue #7): for a failed trace, which node made the decisive mistake, at which step.

Methods: "heuristic" (offline, from the judges' feedback and the trace's structure, see heuristic.py) and the three
LLM methods of the Who&When paper (all_at_once, step_by_step, binary_search, see llm.py). Entry points are in
services.py (`attribution_compute`, `attribution_compute_for_project`) and selectors.py; scoring against
Who&When-style labels in scoring.py and `manage.py attribution_score`.
"""
