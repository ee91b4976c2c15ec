from django.contrib import admin

from diagnosis.models import DiagnosisRun, Feedback, Rubric


@admin.register(DiagnosisRun)
class DiagnosisRunAdmin(admin.ModelAdmin):
    list_display = ("id", "project", "status", "continuous", "done_count", "total_count", "cost", "created_at")
    list_filter = ("status", "continuous")


@admin.register(Rubric)
class RubricAdmin(admin.ModelAdmin):
    list_display = ("name", "project", "kind", "node", "enabled")
    list_filter = ("kind", "enabled")


@admin.register(Feedback)
class FeedbackAdmin(admin.ModelAdmin):
    list_display = ("judge", "trace", "target_span_id", "status", "verdict", "score", "created_at")
    list_filter = ("judge_kind", "status", "verdict")
    raw_id_fields = ("run", "trace", "rubric")
