"""The shop's job types: one registry that jobrelay loads with
``JOBRELAY_HANDLERS=shop.jobs:registry`` (run from ``examples/shop``, or with it on PYTHONPATH).

- ``shop.send_receipt``: an ``async def``, for work that waits on the network.
- ``shop.render_invoice``: a plain ``def``, for blocking or CPU-bound work; jobrelay runs it in a
  thread of its own.
- ``shop.charge``: a payment gateway that is sometimes busy: ``TransientError`` retries it later.
- ``shop.ship``: an order that cannot ship: ``PermanentError`` quarantines it at once with a
  reason code operators filter by.
"""

from __future__ import annotations

import asyncio
import hashlib
import time
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from jobrelay import JobContext, PermanentError, Registry, TransientError

registry = Registry()


class Receipt(BaseModel):
    model_config = ConfigDict(extra="forbid")
    order_id: str = Field(min_length=1, max_length=64)
    email: str = Field(min_length=3, max_length=320)


class Invoice(BaseModel):
    model_config = ConfigDict(extra="forbid")
    order_id: str = Field(min_length=1, max_length=64)
    lines: list[str] = Field(min_length=1, max_length=1000)


class Charge(BaseModel):
    model_config = ConfigDict(extra="forbid")
    order_id: str = Field(min_length=1, max_length=64)
    amount_cents: int = Field(gt=0)
    # How many attempts the (simulated) gateway answers "busy" before it accepts.
    gateway_busy_for: int = Field(0, ge=0, le=10)


class Shipment(BaseModel):
    model_config = ConfigDict(extra="forbid")
    order_id: str = Field(min_length=1, max_length=64)
    address: str = Field("", max_length=500)


@registry.job("shop.send_receipt", Receipt, timeout_seconds=30)
async def send_receipt(context: JobContext, payload: Receipt) -> dict[str, Any]:
    """E-mail the receipt of an order."""
    await asyncio.sleep(0.01)  # the mail provider's API call would be awaited here
    # A retry must not send a second e-mail: the key is the same on every attempt, so the
    # provider can recognise a request it has already served.
    context.logger.info("receipt sent")  # ids only: payloads never go to the logs
    return {"message_id": f"receipt-{context.idempotency_key}"}


@registry.job("shop.render_invoice", Invoice, timeout_seconds=60)
def render_invoice(context: JobContext, payload: Invoice) -> dict[str, Any]:
    """Render an invoice: blocking work in a plain def, run in a thread."""
    time.sleep(0.05)  # a PDF library would block here; the consumer's event loop does not
    body = "\n".join([f"invoice for order {payload.order_id}", *payload.lines]).encode()
    key = f"invoices/{context.job_id}.txt"
    path = context.results_dir / key
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(body)
    return {"key": key, "sha256": hashlib.sha256(body).hexdigest()}


@registry.job("shop.charge", Charge, max_attempts=5, timeout_seconds=20)
async def charge(context: JobContext, payload: Charge) -> dict[str, Any]:
    """Charge an order; a busy gateway is retried with backoff, up to 5 attempts."""
    if context.attempt <= payload.gateway_busy_for:
        raise TransientError("the payment gateway is busy", code="gateway_busy")
    return {"charged_cents": payload.amount_cents, "payment_id": f"pay-{context.idempotency_key}"}


@registry.job("shop.ship", Shipment)
async def ship(context: JobContext, payload: Shipment) -> dict[str, Any]:
    """Book a parcel; an order without an address can never ship."""
    if not payload.address.strip():
        # The message is stored and logged: say what is wrong, not what the payload holds.
        raise PermanentError("the order has no shipping address", code="address_missing")
    return {"tracking": f"PARCEL-{str(context.job_id)[:8].upper()}"}
