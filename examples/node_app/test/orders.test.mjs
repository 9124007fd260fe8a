// examples/node_app against the real database and API of `make test-typescript`: a committed
// order has exactly one job, with its result; a refused one (rolled back after the enqueue) none.
import assert from "node:assert/strict";
import { randomUUID } from "node:crypto";
import { after, before, test } from "node:test";

import { MAX_QUANTITY, createApp, fromEnvironment } from "../server.mjs";

let service;
let app;
let url;

before(async () => {
  for (const name of ["JOBRELAY_DATABASE_URL", "JOBRELAY_API_URL", "JOBRELAY_TOKEN", "JOBRELAY_CLIENT_NAME"]) {
    assert.ok(process.env[name], `${name} must be set (make test-typescript)`);
  }
  service = await fromEnvironment();
  app = createApp(service);
  await new Promise((resolve) => app.listen(0, "127.0.0.1", resolve));
  url = `http://127.0.0.1:${app.address().port}/orders`;
});

after(async () => {
  await new Promise((resolve) => app.close(resolve));
  await service.pool.end();
});

const order = (quantity) => ({ id: randomUUID(), course: "Node", quantity });
const post = (body) =>
  fetch(url, { method: "POST", headers: { "Content-Type": "application/json" }, body: JSON.stringify(body) });

async function jobsOfKey(key) {
  const { rows } = await service.pool.query(
    "SELECT j.id, j.state FROM jobrelay.jobs j JOIN jobrelay.clients c ON c.id = j.client_id " +
      "WHERE c.name = $1 AND j.idempotency_key = $2",
    [process.env.JOBRELAY_CLIENT_NAME, key],
  );
  return rows;
}

async function ordersOf(id) {
  return (await service.pool.query("SELECT job_id FROM shop.orders WHERE id = $1", [id])).rows;
}

test("committed: the order's row and exactly one job, answered with its result", async () => {
  const placed = order(1);
  const response = await post(placed);
  const body = await response.json();
  assert.equal(response.status, 201, JSON.stringify(body));
  assert.equal(body.job.state, "succeeded");
  assert.ok(body.job.result, "no result");
  const jobs = await jobsOfKey(`order-${placed.id}`);
  assert.equal(jobs.length, 1);
  assert.equal(jobs[0].id, body.job.id);
  assert.deepEqual(await ordersOf(placed.id), [{ job_id: body.job.id }]);
});

test("rolled back after the enqueue: no order, no job", async () => {
  const refused = order(MAX_QUANTITY + 1);
  const response = await post(refused);
  assert.equal(response.status, 409);
  assert.deepEqual(await jobsOfKey(`order-${refused.id}`), []);
  assert.deepEqual(await ordersOf(refused.id), []);
});

test("a body that is not an order: 400", async () => {
  const response = await post({ id: 1 });
  assert.equal(response.status, 400);
});
