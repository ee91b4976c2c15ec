"""Judges: rule judges, deterministic rubric checks and LLM judges, all returning `contract.JudgeResult`."""
