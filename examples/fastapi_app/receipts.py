"""The example's one job type: a receipt mailed once its order is committed."""

from pydantic import BaseModel

from jobrelay import JobContext, Registry

registry = Registry()


class Receipt(BaseModel):
    order_id: int
    email: str


@registry.job("orders.send_receipt", Receipt)
async def send_receipt(context: JobContext, payload: Receipt) -> dict[str, str]:
    return {"sent_to": payload.email}  # a real handler mails it, keyed by context.idempotency_key
