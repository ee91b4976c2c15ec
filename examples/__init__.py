"""Example agents that emit OpenTelemetry traces for Clear to diagnose."""
