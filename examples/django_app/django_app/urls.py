from django.urls import path
from orders import views

urlpatterns = [
    path("orders", views.create_order),
    path("orders/<int:order_id>", views.show_order),
    path("tasks/<str:task_id>", views.show_task),
]
