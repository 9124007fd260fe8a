// A Node service that takes orders: in ONE pg transaction it writes its own row and enqueues a
// jobrelay job with `jobrelay.jobrelay_enqueue` (docs/submitting.md), so the order and its job
// are committed together or not at all; then it waits for the job's result through the
// TypeScript client (clients/typescript) and answers with it. docs/typescript.md walks through it.
//
//   DATABASE_URL (or JOBRELAY_DATABASE_URL)  the database jobrelay's migrations ran in
//   JOBRELAY_CLIENT_NAME                     the jobrelay client the jobs belong to
//   JOBRELAY_API_URL, JOBRELAY_TOKEN         that client's API and token, to wait for results
//   PORT                                     where to listen (3000)
import { createServer } from "node:http";
import { pathToFileURL } from "node:url";

import { JobrelayClient } from "jobrelay-client";
import pg from "pg";

// The service's own table, in a schema of its own: not jobrelay's.
const SCHEMA = `
  CREATE SCHEMA IF NOT EXISTS shop;
  CREATE TABLE IF NOT EXISTS shop.orders (
    id text PRIMARY KEY,
    course text NOT NULL,
    quantity int NOT NULL,
    job_id uuid NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now()
  )`;

// Orders above this are refused after the enqueue: the rollback takes the job away too.
export const MAX_QUANTITY = 10;

/** libpq's URL from SQLAlchemy's form (postgresql+psycopg://), which jobrelay's settings use. */
export function libpqUrl(url) {
  return url.replace(/^postgresql\+\w+:/, "postgresql:");
}

/** The order's row and its job, in one transaction: the job's id, or an error that rolled back. */
export async function placeOrder(pool, clientName, order) {
  const db = await pool.connect();
  try {
    await db.query("BEGIN");
    const { rows } = await db.query(
      "SELECT jobrelay.jobrelay_enqueue($1, $2, $3::jsonb, $4) AS job_id",
      [clientName, "catalog.export", JSON.stringify({ course: order.course }), `order-${order.id}`],
    );
    const jobId = rows[0].job_id;
    await db.query("INSERT INTO shop.orders (id, course, quantity, job_id) VALUES ($1, $2, $3, $4)", [
      order.id,
      order.course,
      order.quantity,
      jobId,
    ]);
    if (order.quantity > MAX_QUANTITY) {
      throw new OrderRefused(`at most ${MAX_QUANTITY} of a course per order`);
    }
    await db.query("COMMIT");
    return jobId;
  } catch (error) {
    await db.query("ROLLBACK");
    throw error;
  } finally {
    db.release();
  }
}

export class OrderRefused extends Error {}

/** The service: POST /orders {"id", "course", "quantity"} answers 201 with the job's result. */
export function createApp({ pool, clientName, jobs, waitSeconds = 30 }) {
  return createServer(async (request, response) => {
    const answer = (status, body) =>
      response.writeHead(status, { "Content-Type": "application/json" }).end(JSON.stringify(body));
    if (request.method !== "POST" || request.url !== "/orders") return answer(404, { error: "not found" });
    let order;
    try {
      const chunks = [];
      for await (const chunk of request) chunks.push(chunk);
      order = JSON.parse(Buffer.concat(chunks).toString("utf8"));
    } catch {
      return answer(400, { error: "the body is not JSON" });
    }
    if (typeof order?.id !== "string" || typeof order.course !== "string" || !Number.isInteger(order.quantity)) {
      return answer(400, { error: 'an order is {"id": string, "course": string, "quantity": integer}' });
    }
    try {
      const jobId = await placeOrder(pool, clientName, order);
      const job = await jobs.wait(jobId, waitSeconds);
      return answer(201, { order: order.id, job: { id: job.id, state: job.state, result: job.result } });
    } catch (error) {
      if (error instanceof OrderRefused) return answer(409, { error: error.message });
      console.error("order %s failed: %s", order.id, error.message);
      return answer(500, { error: "the order could not be placed" });
    }
  });
}

/** The pool, the service's table and the client, from the environment. */
export async function fromEnvironment(env = process.env) {
  const url = env.DATABASE_URL ?? env.JOBRELAY_DATABASE_URL;
  if (!url) throw new Error("DATABASE_URL (or JOBRELAY_DATABASE_URL) is not set");
  const pool = new pg.Pool({ connectionString: libpqUrl(url), max: 4 });
  await pool.query(SCHEMA);
  const jobs = new JobrelayClient({ baseUrl: env.JOBRELAY_API_URL, token: env.JOBRELAY_TOKEN });
  return { pool, clientName: env.JOBRELAY_CLIENT_NAME, jobs };
}

if (import.meta.url === pathToFileURL(process.argv[1]).href) {
  const app = createApp(await fromEnvironment());
  const port = Number(process.env.PORT ?? 3000);
  app.listen(port, () => console.log(`orders on http://127.0.0.1:${port}/orders`));
}
