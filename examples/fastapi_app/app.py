"""The smallest FastAPI service that enqueues in its own transaction (the README's "FastAPI")."""

import os
from contextlib import asynccontextmanager

import psycopg
from fastapi import FastAPI
from pydantic import BaseModel
from receipts import Receipt, send_receipt

import jobrelay

DATABASE = jobrelay.libpq_url(os.environ["JOBRELAY_DATABASE_URL"])  # jobrelay's database
jobrelay.configure(client_name=os.environ.get("ORDERS_JOBRELAY_CLIENT", "orders"))


@asynccontextmanager
async def lifespan(app: FastAPI):  # type: ignore[no-untyped-def]
    async with await psycopg.AsyncConnection.connect(DATABASE, autocommit=True) as connection:
        await connection.execute(
            "CREATE TABLE IF NOT EXISTS orders (id bigserial PRIMARY KEY, email text NOT NULL)"
        )
    yield


app = FastAPI(lifespan=lifespan)


class NewOrder(BaseModel):
    email: str


@app.post("/orders", status_code=201)
async def create_order(order: NewOrder) -> dict[str, object]:
    connection = await psycopg.AsyncConnection.connect(DATABASE)
    async with connection, connection.transaction():  # the order and its job, or neither
        cursor = await connection.execute(
            "INSERT INTO orders (email) VALUES (%s) RETURNING id", [order.email]
        )
        (order_id,) = await cursor.fetchone()  # type: ignore[misc]
        job = await send_receipt.enqueue_async(
            Receipt(order_id=order_id, email=order.email),
            key=f"receipt:{order_id}",
            connection=connection,
        )
    return {"order_id": order_id, "job_id": str(job.id)}
