"""The orders' background work: a Django task, run by ``jobrelay consumer`` (found here, in
the ``tasks`` module of an installed app)."""

from __future__ import annotations

from typing import Any

from jobrelay.django.compat import task
from orders.models import Order


@task()
def confirm_order(order_id: int) -> dict[str, Any]:
    """Marks an order confirmed."""
    updated = Order.objects.filter(id=order_id).update(confirmed=True)
    if not updated:  # not committed yet, or gone: the attempt fails and is retried
        raise Order.DoesNotExist(f"no order {order_id}")
    return {"order_id": order_id, "confirmed": True}
