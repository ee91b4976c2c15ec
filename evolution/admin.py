from django.contrib import admin

from evolution.models import AuditEvent, EvolutionJob, EvolutionTarget, Iteration, StageRun, TrialRun


@admin.register(EvolutionTarget)
class EvolutionTargetAdmin(admin.ModelAdmin):
    list_display = ("name", "project", "source", "default_branch", "created_at")


class IterationInline(admin.TabularInline):
    model = Iteration
    fields = ("n", "status", "verdict", "score", "candidate_commit", "failure_reason")
    readonly_fields = fields
    extra = 0
    can_delete = False


@admin.register(EvolutionJob)
class EvolutionJobAdmin(admin.ModelAdmin):
    list_display = ("id", "project", "target", "state", "terminal_reason", "depth", "backend_name", "sandbox_level",
                    "current_iteration", "heartbeat_at", "created_at")
    list_filter = ("state", "depth", "backend_name", "sandbox_level")
    raw_id_fields = ("insight", "ticket", "best_iteration")
    # The state machine owns these; editing them here would bypass the transition helper and its audit.
    readonly_fields = ("state", "state_version", "base_commit", "current_iteration", "best_iteration",
                       "consent_by", "consent_at", "consent_patch_sha256", "heartbeat_at", "terminal_reason")
    inlines = [IterationInline]


@admin.register(StageRun)
class StageRunAdmin(admin.ModelAdmin):
    list_display = ("job", "iteration_n", "stage", "round", "status", "outcome", "isolation_level", "started_at")
    list_filter = ("stage", "status")


@admin.register(TrialRun)
class TrialRunAdmin(admin.ModelAdmin):
    list_display = ("job", "iteration_n", "task", "arm", "trial_n", "score", "passed", "timed_out", "isolation_level")
    list_filter = ("arm", "passed", "timed_out")


@admin.register(AuditEvent)
class AuditEventAdmin(admin.ModelAdmin):
    list_display = ("job", "ts", "actor", "event", "from_state", "to_state")

    def has_change_permission(self, request, obj=None):  # append-only
        return False

    def has_delete_permission(self, request, obj=None):
        return False
