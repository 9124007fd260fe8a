"""``POST /orders`` creates an order and enqueues its confirmation in one transaction."""

from __future__ import annotations

import json

from django.db import transaction
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_GET, require_POST

from orders.models import Order
from orders.tasks import confirm_order


class PaymentDeclined(Exception):
    """Stands for whatever fails after the enqueue, inside the same transaction."""


@csrf_exempt
@require_POST
def create_order(request: HttpRequest) -> HttpResponse:
    try:
        body = json.loads(request.body or b"{}")
    except ValueError:
        return JsonResponse({"error": "the body is not JSON"}, status=400)
    item = body.get("item") if isinstance(body, dict) else None
    if not isinstance(item, str) or not 1 <= len(item) <= 200:
        return JsonResponse({"error": "item: a text of 1 to 200 characters"}, status=400)
    try:
        with transaction.atomic():
            order = Order.objects.create(item=item)
            result = confirm_order.enqueue(order.id)
            if body.get("decline_payment"):
                raise PaymentDeclined
    except PaymentDeclined:
        # Rolled back: the order and its task's job alike, so nothing confirms a lost order.
        return JsonResponse({"error": "payment declined; no order was made"}, status=402)
    return JsonResponse({"order_id": order.id, "task_id": result.id}, status=201)


@require_GET
def show_order(request: HttpRequest, order_id: int) -> HttpResponse:
    order = Order.objects.filter(id=order_id).first()
    if order is None:
        return JsonResponse({"error": "no such order"}, status=404)
    return JsonResponse({"id": order.id, "item": order.item, "confirmed": order.confirmed})


@require_GET
def show_task(request: HttpRequest, task_id: str) -> HttpResponse:
    from jobrelay.django.compat import TaskResultDoesNotExist

    try:
        result = confirm_order.get_result(task_id)
    except TaskResultDoesNotExist:
        return JsonResponse({"error": "no such task"}, status=404)
    document = {"id": result.id, "status": str(result.status), "attempts": result.attempts}
    if str(result.status) == "SUCCESSFUL":
        document["return_value"] = result.return_value
    return JsonResponse(document)
