// The client against a real jobrelay API with a dispatcher and a consumer, started by
// `make test-typescript` (scripts/test_typescript.sh): JOBRELAY_API_URL and JOBRELAY_TOKEN.
import assert from "node:assert/strict";
import { randomUUID } from "node:crypto";
import { test } from "node:test";

import { ApiError, DuplicateJobError, IdempotencyConflict, JobFinished, JobrelayClient } from "../dist/index.js";

const baseUrl = process.env.JOBRELAY_API_URL;
const token = process.env.JOBRELAY_TOKEN;
if (!baseUrl || !token) {
  // Never a skip: without the API these tests cannot say anything.
  throw new Error("JOBRELAY_API_URL and JOBRELAY_TOKEN must be set (make test-typescript)");
}
const client = new JobrelayClient({ baseUrl, token });
const HOUR = 3600;

test("submit: 202 and a queued job carrying its key", async () => {
  const key = `ts-${randomUUID()}`;
  const job = await client.submit("catalog.export", { course: "TypeScript" }, { key });
  assert.equal(job.type, "catalog.export");
  assert.equal(job.idempotency_key, key);
  assert.ok(["queued", "running", "succeeded"].includes(job.state), job.state);
});

test("the same key again: the same job", async () => {
  const key = `ts-${randomUUID()}`;
  const first = await client.submit("catalog.export", { course: "Again" }, { key });
  const second = await client.submit("catalog.export", { course: "Again" }, { key });
  assert.equal(second.id, first.id);
});

test("the same key with another payload: IdempotencyConflict naming the job", async () => {
  const key = `ts-${randomUUID()}`;
  const first = await client.submit("catalog.export", { course: "One" }, { key });
  const error = await client.submit("catalog.export", { course: "Two" }, { key }).catch((e) => e);
  assert.ok(error instanceof IdempotencyConflict, String(error));
  assert.ok(error instanceof ApiError);
  assert.equal(error.status, 409);
  assert.equal(error.code, "idempotency_conflict");
  assert.equal(error.jobId, first.id);
  assert.equal(error.problem.job_id, first.id);
});

test("wait: succeeded, with its result", async () => {
  const job = await client.submit("demo.sleep", { seconds: 0.1 });
  const done = await client.wait(job.id, 60);
  assert.equal(done.state, "succeeded");
  assert.deepEqual(done.result, { slept: 0.1 });
  assert.equal((await client.get(job.id)).state, "succeeded");
});

test("submitMany: one answer per job, a refusal as its ApiError", async () => {
  const answers = await client.submitMany([
    { type: "demo.sleep", payload: { seconds: 0 } },
    { type: "catalog.export", payload: { course: "Batch" }, idempotency_key: `ts-${randomUUID()}` },
    { type: "demo.sleep", payload: { seconds: -1 } },
  ]);
  assert.equal(answers.length, 3);
  assert.equal(answers[0].type, "demo.sleep");
  assert.equal(answers[1].type, "catalog.export");
  assert.ok(answers[2] instanceof ApiError, String(answers[2]));
  assert.equal(answers[2].status, 422);
});

test("list: follows next_cursor across pages", async () => {
  const type = "catalog.export";
  const made = [];
  for (let i = 0; i < 3; i++) made.push((await client.submit(type, { course: `List ${i}` })).id);
  const seen = [];
  for await (const job of client.list({ type, pageSize: 2 })) seen.push(job.id);
  assert.ok(seen.length >= 3, `${seen.length} jobs`);
  for (const id of made) assert.ok(seen.includes(id), `${id} not listed`);
  assert.equal(new Set(seen).size, seen.length, "a job listed twice");
});

test("cancel: a delayed job is cancelled", async () => {
  const job = await client.submit("demo.sleep", { seconds: 0 }, { delay_seconds: HOUR });
  const cancelled = await client.cancel(job.id);
  assert.equal(cancelled.state, "cancelled");
});

test("a workflow: submitted, finished in order, read back", async () => {
  const workflow = await client.submitWorkflow([
    { ref: "first", type: "demo.sleep", payload: { seconds: 0 } },
    { ref: "then", type: "catalog.export", payload: { course: "Flow" }, after: ["first"] },
  ]);
  assert.deepEqual(Object.keys(workflow.jobs).sort(), ["first", "then"]);
  const last = await client.wait(workflow.jobs.then.id, 60);
  assert.equal(last.state, "succeeded");
  const read = await client.getWorkflow(workflow.id);
  assert.equal(read.state, "succeeded");
});

test("cancelWorkflow: a workflow not finished is cancelled", async () => {
  const workflow = await client.submitWorkflow([
    { ref: "long", type: "demo.sleep", payload: { seconds: 30 } },
    { ref: "after", type: "demo.sleep", payload: { seconds: 0 }, after: ["long"] },
  ]);
  const cancelled = await client.cancelWorkflow(workflow.id);
  assert.notEqual(cancelled.cancelled_at, null);
  assert.equal((await client.getWorkflow(workflow.id)).id, workflow.id);
});

test("a signal to a finished job: JobFinished", async () => {
  const job = await client.submit("demo.sleep", { seconds: 0 });
  await client.wait(job.id, 60);
  const error = await client.signal(job.id, "approved", { by: "ts" }).catch((e) => e);
  assert.ok(error instanceof JobFinished, String(error));
  assert.equal(error.status, 409);
  assert.equal(error.code, "job_finished");
});

test("a 422 is a typed problem with its field errors", async () => {
  const error = await client.submit("demo.sleep", { seconds: "long" }).catch((e) => e);
  assert.ok(error instanceof ApiError, String(error));
  assert.equal(error.status, 422);
  assert.equal(typeof error.code, "string");
  assert.ok(error.title.length > 0);
  assert.ok(Array.isArray(error.problem.errors) && error.problem.errors.length > 0, JSON.stringify(error.problem));
});

test("a 404 for an unknown job", async () => {
  const error = await client.get(randomUUID()).catch((e) => e);
  assert.ok(error instanceof ApiError, String(error));
  assert.equal(error.status, 404);
});

test("the order and submission policies: a debounce, a refused duplicate, a sequence", async () => {
  const unique = `ts-${randomUUID()}`;
  const debounce = { unique_key: unique, debounce_seconds: 60 };
  const first = await client.submit("catalog.export", { course: "draft 1" }, debounce);
  const second = await client.submit("catalog.export", { course: "draft 2" }, debounce);
  assert.equal(second.id, first.id);
  assert.equal(second.debounced, true);
  assert.deepEqual(second.payload, { course: "draft 2" });

  const once = { unique_key: `ts-${randomUUID()}`, on_duplicate: "reject" };
  const made = await client.submit("demo.sleep", { seconds: 30 }, once);
  const refused = await client.submit("demo.sleep", { seconds: 30 }, once).catch((e) => e);
  assert.ok(refused instanceof DuplicateJobError, String(refused));
  assert.equal(refused.code, "duplicate_job");
  assert.equal(refused.jobId, made.id);
  await client.cancel(made.id);

  const sequence_key = `ts-${randomUUID()}`;
  const ahead = await client.submit("demo.sleep", { seconds: 0.2 }, { sequence_key });
  const behind = await client.submit("demo.sleep", { seconds: 0 }, { sequence_key });
  assert.equal(behind.sequence_key, sequence_key);
  const done = await client.wait(behind.id, 60);
  assert.equal(done.state, "succeeded");
  const first_done = await client.get(ahead.id);
  assert.equal(first_done.state, "succeeded");
  assert.ok(new Date(first_done.finished_at) <= new Date(done.finished_at));
});
