// The client's retries, a unit test of its logic: a fake server in front of nothing, or a proxy
// in front of the real API (JOBRELAY_API_URL) that answers 503 first.
import assert from "node:assert/strict";
import { createServer } from "node:http";
import { test } from "node:test";

import { JobrelayClient, RetryPolicy, ThrottledError, parseRetryAfter } from "../dist/index.js";

const QUICK = { retries: 2, backoffBase: 0.01, backoffMax: 0.02 };

// A server on a free port whose answers `answer(request, body)` gives; its URL and the requests.
async function serving(answer) {
  const seen = [];
  const server = createServer(async (request, response) => {
    const chunks = [];
    for await (const chunk of request) chunks.push(chunk);
    const body = Buffer.concat(chunks);
    seen.push({ method: request.method, url: request.url, headers: request.headers, body });
    const { status, headers, text } = await answer(request, body, seen.length);
    response.writeHead(status, headers).end(text);
  });
  await new Promise((resolve) => server.listen(0, "127.0.0.1", resolve));
  const url = `http://127.0.0.1:${server.address().port}`;
  return { url, seen, close: () => new Promise((resolve) => server.close(resolve)) };
}

const problem = (status, code, extra = {}) => ({
  status,
  headers: { "Content-Type": "application/problem+json", ...extra },
  text: JSON.stringify({ type: "about:blank", title: code, status, code, detail: code }),
});

test("a 503 then the real API's 202: sent again with the same key, one job", async () => {
  const api = process.env.JOBRELAY_API_URL;
  const token = process.env.JOBRELAY_TOKEN;
  assert.ok(api && token, "JOBRELAY_API_URL and JOBRELAY_TOKEN must be set (make test-typescript)");
  const proxy = await serving(async (request, body, count) => {
    if (count === 1) return problem(503, "overloaded", { "Retry-After": "0" });
    const headers = { ...request.headers };
    delete headers.host;
    delete headers.connection;
    delete headers["content-length"];
    const forwarded = await fetch(api + request.url, { method: request.method, headers, body });
    return { status: forwarded.status, headers: { "Content-Type": "application/json" }, text: await forwarded.text() };
  });
  try {
    const client = new JobrelayClient({ baseUrl: proxy.url, token, ...QUICK });
    const job = await client.submit("catalog.export", { course: "Retried" });
    assert.equal(proxy.seen.length, 2);
    const [first, second] = proxy.seen.map((request) => request.headers["idempotency-key"]);
    assert.ok(first);
    assert.equal(second, first);
    assert.equal(job.idempotency_key, first);
  } finally {
    await proxy.close();
  }
});

test("429 rate_limited is retried; 429 throttled is not", async () => {
  const fake = await serving(async (request, body, count) =>
    count === 1 ? problem(429, "rate_limited", { "Retry-After": "0" }) : problem(429, "throttled", { "Retry-After": "7" }),
  );
  try {
    const client = new JobrelayClient({ baseUrl: fake.url, token: "t", ...QUICK });
    const error = await client.submit("catalog.export", { course: "x" }).catch((e) => e);
    assert.ok(error instanceof ThrottledError, String(error));
    assert.equal(error.retryAfter, 7);
    assert.equal(fake.seen.length, 2);
  } finally {
    await fake.close();
  }
});

test("connection refused: retried, then the error after the bound", async () => {
  const closed = await serving(async () => problem(500, "unused"));
  await closed.close(); // its port now refuses connections
  let calls = 0;
  const counting = (...args) => {
    calls += 1;
    return fetch(...args);
  };
  const client = new JobrelayClient({ baseUrl: closed.url, token: "t", fetch: counting, ...QUICK });
  const error = await client.submit("catalog.export", { course: "x" }).catch((e) => e);
  assert.ok(error instanceof TypeError, String(error));
  assert.equal(error.cause?.code, "ECONNREFUSED");
  assert.equal(calls, 1 + QUICK.retries);
});

test("a cancel is not sent again after a broken connection", async () => {
  const fake = await serving(async (request) => {
    request.socket.destroy(); // the request arrived: the server may have acted
    return problem(500, "unused");
  });
  try {
    const client = new JobrelayClient({ baseUrl: fake.url, token: "t", ...QUICK });
    const error = await client.cancel("00000000-0000-0000-0000-000000000001").catch((e) => e);
    assert.ok(error instanceof TypeError, String(error));
    assert.equal(fake.seen.length, 1);
  } finally {
    await fake.close();
  }
});

test("Retry-After: seconds or an HTTP date; the policy bounds it", () => {
  assert.equal(parseRetryAfter("3"), 3);
  assert.equal(parseRetryAfter(null), undefined);
  assert.equal(parseRetryAfter("Thu, 01 Jan 1970 00:00:00 GMT"), 0);
  const policy = new RetryPolicy({ retries: 1, retryAfterMax: 5 });
  assert.equal(policy.wait(1, "unsent", false, 100), 5);
  assert.equal(policy.wait(2, "unsent", true), undefined);
  assert.equal(policy.wait(1, "ambiguous", false), undefined);
  const backoff = policy.wait(1, "ambiguous", true);
  assert.ok(backoff >= 0.25 && backoff <= 0.5, String(backoff));
});
