"""Tickets (DESIGN §7, issue #7): one per insight, deduplicated by the insight's fingerprint, with a Markdown body
(what happens, escaped evidence quotes, traces to reproduce, the node, the suggested fix, lift and frequency) and a
status kept in step with the insight's. Bug lists export as Markdown, CSV and JSON (export.py) and are pushed to a
GitHub-compatible issues API (tracker.py, push.py). Entry points: services.py, selectors.py, apis.py, commands.
"""
