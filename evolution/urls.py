app_name = "evolution"

urlpatterns: list = []
