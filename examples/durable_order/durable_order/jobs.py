"""An order as one durable job (docs/durable-execution.md), loaded with
``JOBRELAY_HANDLERS=durable_order.jobs:registry`` (run from ``examples/durable_order``, or with
it on PYTHONPATH).

``orders.fulfil`` charges the card (a step: never twice, whatever happens to the consumer),
waits for the warehouse's signal that the parcel left (up to three days; without it the charge
is refunded), mails the confirmation (a step), sleeps a day without holding a consumer, and
sends the follow-up mail as a child job, ``orders.mail``, whose result it waits for.

The payment and mail providers are stand-ins: each call takes the idempotency key a real
provider would get, derived from the job, so that a step cut short before it was recorded is
not a second charge at the provider either.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from jobrelay import JobContext, Registry, SignalTimeout

registry = Registry()

# How long the warehouse has to ship before the order is refunded, and the follow-up's delay.
WAREHOUSE_DEADLINE_SECONDS = 3 * 24 * 3600
FOLLOW_UP_AFTER_SECONDS = 24 * 3600


class Order(BaseModel):
    model_config = ConfigDict(extra="forbid")
    order_id: str = Field(min_length=1, max_length=64)
    amount_cents: int = Field(gt=0)
    email: str = Field(min_length=3, max_length=320)


class Mail(BaseModel):
    model_config = ConfigDict(extra="forbid")
    order_id: str = Field(min_length=1, max_length=64)
    email: str = Field(min_length=3, max_length=320)
    template: str = Field(min_length=1, max_length=64)


# --- the providers' stand-ins ----------------------------------------------------------------


def charge_card(order_id: str, amount_cents: int, key: str) -> dict[str, Any]:
    """The payment provider's charge, under an idempotency key."""
    return {"payment_id": f"pay-{key}", "amount_cents": amount_cents}


def refund(payment_id: str) -> dict[str, Any]:
    return {"refund_id": f"re-{payment_id}"}


async def send_email(email: str, template: str, key: str) -> dict[str, Any]:
    """The mail provider's send, under an idempotency key."""
    return {"message_id": f"{template}-{key}"}


# --- the job types ---------------------------------------------------------------------------


@registry.job("orders.mail", Mail, max_attempts=5, timeout_seconds=30)
async def mail(context: JobContext, payload: Mail) -> dict[str, Any]:
    """One mail, its own job: retried on its own, and a parent's ``run_child`` waits for it."""
    return await send_email(payload.email, payload.template, context.idempotency_key)


@registry.job("orders.fulfil", Order, max_attempts=5, timeout_seconds=60)
async def fulfil(context: JobContext, payload: Order) -> dict[str, Any]:
    """An order from payment to follow-up. Every attempt runs from the top: what is recorded
    returns at once, so the card is charged once and the day is slept once."""
    key = context.idempotency_key
    payment = await context.step(
        "charge", charge_card, payload.order_id, payload.amount_cents, f"{key}:charge"
    )
    try:
        parcel = await context.wait_for_signal("warehouse", timeout=WAREHOUSE_DEADLINE_SECONDS)
    except SignalTimeout:
        refunded = await context.step("refund", refund, payment["payment_id"])
        return {"status": "refunded", "payment": payment, "refund": refunded}
    confirmation = await context.step(
        "confirm", send_email, payload.email, "shipped", f"{key}:confirm"
    )
    await context.sleep(FOLLOW_UP_AFTER_SECONDS)
    follow_up = await context.run_child(
        "orders.mail",
        {"order_id": payload.order_id, "email": payload.email, "template": "how-was-it"},
    )
    return {
        "status": "done",
        "payment": payment,
        "parcel": parcel,
        "confirmation": confirmation,
        "follow_up": follow_up,
    }
