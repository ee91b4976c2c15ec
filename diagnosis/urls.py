app_name = "diagnosis"

urlpatterns: list = []
