from django.db import models


class Order(models.Model):
    paid = models.BooleanField(default=False)
    note = models.CharField(max_length=100, default="")
