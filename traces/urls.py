app_name = "traces"

urlpatterns: list = []
