// jobrelay's API from TypeScript: the calls of the Python client (jobrelay.Client), typed from
// the OpenAPI document (src/schema.d.ts, generated from openapi.json by `make typescript-types`)
// and sent with openapi-fetch. Every try of a call carries the same Idempotency-Key, so a
// retried submission makes one job.
import { randomUUID } from "node:crypto";
import createClient, { type Client } from "openapi-fetch";

import { ApiError } from "./errors.js";
import { type Failure, RetryPolicy, type RetryOptions, fetchFailure, parseRetryAfter, statusFailure } from "./retry.js";
import type { components, paths } from "./schema.js";

export * from "./errors.js";
export { RetryPolicy, parseRetryAfter, type RetryOptions } from "./retry.js";
export type { components, paths } from "./schema.js";

type Schemas = components["schemas"];
export type Job = Schemas["JobView"];
export type JobState = Schemas["JobState"];
/** A submission answered by an earlier job (a unique key's return_existing, a debounce). */
export type SubmittedJob = Job | Schemas["DeduplicatedJobView"] | Schemas["DebouncedJobView"];
export type Workflow = Schemas["WorkflowViewOut"];
export type WorkflowJob = Schemas["WorkflowJobIn"];
export type Signal = Schemas["SignalView"];
/** The body of a submission but its type and payload: run_at, delay_seconds, priority and the
 * order and policy fields (sequence_key, unique_for_seconds, on_duplicate, debounce_seconds,
 * debounce_max_seconds, throttle_key, ...). */
export type SubmitFields = Omit<Schemas["SubmitJob"], "type" | "payload">;
export interface SubmitOptions extends SubmitFields {
  /** The Idempotency-Key: a random UUID when none is given. */
  key?: string;
}
/** One job of submitMany: a batch item whose key may be left out. */
export type BatchJob = Omit<Schemas["BatchItem"], "idempotency_key"> & { idempotency_key?: string };

export const FINISHED_STATES: ReadonlySet<JobState> = new Set(["succeeded", "quarantined", "cancelled"]);
export const MAX_BATCH = 1000;
const MAX_WAIT_SECONDS = 60;

export interface ClientOptions extends RetryOptions {
  baseUrl: string;
  token: string;
  /** Seconds one try may take (10), plus what a ?wait asks the server to take. */
  timeout?: number;
  /** The fetch to send with (tests); globalThis.fetch by default. */
  fetch?: typeof globalThis.fetch;
}

// What openapi-fetch answers, whatever the operation.
interface Answer<T> {
  data?: T;
  error?: unknown;
  response: Response;
}

// One try of a call: `signal` bounds its time.
type Send<T> = (signal: AbortSignal) => Promise<Answer<T>>;

export class JobrelayClient {
  readonly baseUrl: string;
  private readonly http: Client<paths>;
  private readonly policy: RetryPolicy;
  private readonly timeout: number;

  constructor(options: ClientOptions) {
    if (!options.token) throw new TypeError("token is empty");
    this.baseUrl = options.baseUrl;
    this.policy = new RetryPolicy(options);
    this.timeout = options.timeout ?? 10;
    this.http = createClient<paths>({
      baseUrl: options.baseUrl,
      headers: { Authorization: `Bearer ${options.token}`, Accept: "application/json" },
      fetch: options.fetch,
    });
  }

  /** POST /v1/jobs: 202 and a new job, or 200 and the job its key (or unique key) made. */
  async submit(type: string, payload: Record<string, unknown> = {}, options: SubmitOptions = {}): Promise<SubmittedJob> {
    const { key, ...fields } = options;
    const headers = { "idempotency-key": idempotencyKey(key) };
    const body = { ...fields, type, payload };
    return this.run(true, (signal) => this.http.POST("/v1/jobs", { params: { header: headers }, body, signal }));
  }

  /** POST /v1/jobs/batch: one answer per job, in order, a job or the ApiError of its refusal.
   * A job without a key gets a random one here, the same for every try. */
  async submitMany(jobs: BatchJob[]): Promise<(SubmittedJob | ApiError)[]> {
    if (jobs.length < 1 || jobs.length > MAX_BATCH) throw new RangeError(`a batch is 1 to ${MAX_BATCH} jobs`);
    const items = jobs.map((job) => ({ ...job, idempotency_key: idempotencyKey(job.idempotency_key) }));
    const answer = await this.run(true, (signal) => this.http.POST("/v1/jobs/batch", { body: { jobs: items }, signal }));
    return answer.results.map((item) =>
      item.job ? item.job : ApiError.from(item.status, (item.error ?? {}) as Record<string, unknown>),
    );
  }

  /** GET /v1/jobs/{id}; `steps: "values"` adds the recorded steps' values. */
  async get(id: string, options: { steps?: "values" } = {}): Promise<Job> {
    const query = options.steps ? { steps: options.steps } : {};
    return this.run(true, (signal) => this.http.GET("/v1/jobs/{job_id}", { params: { path: { job_id: id }, query }, signal }));
  }

  /** The job once finished (succeeded, quarantined, cancelled): the API's ?wait= long poll,
   * asked again until then; a TimeoutError after `timeout` seconds. */
  async wait(id: string, timeout: number): Promise<Job> {
    const deadline = Date.now() + timeout * 1000;
    for (;;) {
      const left = Math.min((deadline - Date.now()) / 1000, MAX_WAIT_SECONDS);
      const query = left > 0 ? { wait: Number(left.toFixed(3)) } : {};
      const job = await this.run(
        true,
        (signal) => this.http.GET("/v1/jobs/{job_id}", { params: { path: { job_id: id }, query }, signal }),
        Math.max(left, 0),
      );
      if (FINISHED_STATES.has(job.state)) return job;
      if (Date.now() >= deadline) throw new TimeoutError(`job ${id} is still ${job.state}`);
    }
  }

  /** POST /v1/jobs/{id}/cancel. Not sent again when unsure it arrived: a cancel the server did
   * act on answers 409 not_cancellable when repeated. */
  async cancel(id: string): Promise<Job> {
    return this.run(false, (signal) => this.http.POST("/v1/jobs/{job_id}/cancel", { params: { path: { job_id: id } }, signal }));
  }

  /** Your jobs, newest first, page after page (following next_cursor). */
  async *list(filter: { state?: JobState; type?: string; pageSize?: number } = {}): AsyncGenerator<Job> {
    let cursor: string | undefined;
    do {
      const query = { state: filter.state, type: filter.type, limit: filter.pageSize, cursor };
      const page = await this.run(true, (signal) => this.http.GET("/v1/jobs", { params: { query }, signal }));
      yield* page.items;
      cursor = page.next_cursor ?? undefined;
    } while (cursor !== undefined);
  }

  /** POST /v1/jobs/{id}/signals/{name}: `value` (any JSON value) for the job's wait_for_signal. */
  async signal(id: string, name: string, value: unknown, options: { key?: string } = {}): Promise<Signal> {
    const header = { "idempotency-key": idempotencyKey(options.key) };
    const path = { job_id: id, name };
    return this.run(true, (signal) =>
      this.http.POST("/v1/jobs/{job_id}/signals/{name}", { params: { path, header }, body: value as never, signal }),
    );
  }

  /** POST /v1/workflows: jobs with refs and `after` edges, made whole or not at all. */
  async submitWorkflow(
    jobs: WorkflowJob[],
    options: { key?: string; onFailure?: Schemas["OnFailure"] } = {},
  ): Promise<Workflow> {
    const header = { "idempotency-key": idempotencyKey(options.key) };
    const body = { jobs, on_failure: options.onFailure ?? "cancel_dependents" };
    return this.run(true, (signal) => this.http.POST("/v1/workflows", { params: { header }, body, signal }));
  }

  async getWorkflow(id: string): Promise<Workflow> {
    const path = { workflow_id: id };
    return this.run(true, (signal) => this.http.GET("/v1/workflows/{workflow_id}", { params: { path }, signal }));
  }

  /** Repeatable, unlike a job's cancel: a cancelled workflow's cancel answers its view again. */
  async cancelWorkflow(id: string): Promise<Workflow> {
    const path = { workflow_id: id };
    return this.run(true, (signal) => this.http.POST("/v1/workflows/{workflow_id}/cancel", { params: { path }, signal }));
  }

  // The tries of one call: its answer, or the error that ends it (RetryPolicy decides).
  private async run<T>(repeatable: boolean, send: Send<T>, extraSeconds = 0): Promise<T> {
    for (let retry = 1; ; retry++) {
      let error: unknown;
      let failure: Failure | undefined;
      let retryAfter: number | undefined;
      try {
        const answer = await send(AbortSignal.timeout((this.timeout + extraSeconds) * 1000));
        if (answer.response.ok) return answer.data as T;
        retryAfter = parseRetryAfter(answer.response.headers.get("Retry-After"));
        error = ApiError.from(answer.response.status, problemOf(answer.error), retryAfter);
        // A throttle's refusal is the type's answer, not the server's trouble: sent again at
        // once it is refused again; the caller decides when (error.retryAfter).
        failure = (error as ApiError).code === "throttled" ? undefined : statusFailure(answer.response.status);
      } catch (thrown) {
        error = thrown;
        failure = fetchFailure(thrown);
      }
      const seconds = this.policy.wait(retry, failure, repeatable, retryAfter);
      if (seconds === undefined) throw error;
      await new Promise((resolve) => setTimeout(resolve, seconds * 1000));
    }
  }
}

export class TimeoutError extends Error {
  override name = "TimeoutError";
}

const VISIBLE_ASCII = /^[!-~]{1,200}$/;

function idempotencyKey(key: string | undefined): string {
  if (key === undefined) return randomUUID();
  if (!VISIBLE_ASCII.test(key)) throw new TypeError("key must be 1 to 200 visible ASCII characters");
  return key;
}

// openapi-fetch gives an error answer's body parsed as JSON (or its text when it is not JSON).
function problemOf(body: unknown): Record<string, unknown> {
  return typeof body === "object" && body !== null ? (body as Record<string, unknown>) : { detail: String(body ?? "") };
}
