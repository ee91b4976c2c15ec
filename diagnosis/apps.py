from django.apps import AppConfig


class DiagnosisConfig(AppConfig):
    name = "diagnosis"

    def ready(self) -> None:
        from traces.hooks import trace_delete_hook_register

        # Runs and insights counted the traces: read them before the cascade (a dotted path: imported at the first
        # deletion, not while the apps load).
        trace_delete_hook_register(name="diagnosis",
                                   hook="diagnosis.services.trace_deletion.traces_delete_prepare")
