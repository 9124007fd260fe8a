from django.db import models


class Order(models.Model):
    item = models.CharField(max_length=200)
    confirmed = models.BooleanField(default=False)
    created_at = models.DateTimeField(auto_now_add=True)
