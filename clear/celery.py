import os

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "clear.settings.base")

app = Celery("clear")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()
# Each app's reactions to other apps' facts (settings.CLEAR_OUTBOX_SUBSCRIPTIONS names them).
app.autodiscover_tasks(related_name="subscribers")
