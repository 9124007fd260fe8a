// The API's problems (RFC 9457 problem+json) as errors: one class with the problem's fields,
// and a subclass for each code a caller acts on, as the Python client's errors.py.
import type { components } from "./schema.js";

export type Problem = components["schemas"]["Problem"];

export class ApiError extends Error {
  readonly status: number;
  readonly code: string;
  readonly title: string;
  readonly detail: string;
  /** Seconds from the answer's Retry-After, when it had one. */
  readonly retryAfter: number | undefined;
  /** The job holding the key, of an idempotency_conflict or a duplicate_job. */
  readonly jobId: string | undefined;
  /** The problem as the API sent it (field errors of a 422 in `problem.errors`). */
  readonly problem: Partial<Problem> & Record<string, unknown>;

  constructor(status: number, problem: Record<string, unknown>, retryAfter?: number) {
    const code = typeof problem.code === "string" && problem.code ? problem.code : `http_${status}`;
    const title = typeof problem.title === "string" ? problem.title : "";
    const detail = String(problem.detail ?? problem.title ?? "error");
    super(`${status} ${code}: ${detail}`);
    this.name = new.target.name;
    this.status = status;
    this.code = code;
    this.title = title;
    this.detail = detail;
    this.retryAfter = retryAfter;
    this.jobId = typeof problem.job_id === "string" ? problem.job_id : undefined;
    this.problem = problem;
  }

  /** The error for an answer: of the class its code names, else ApiError. */
  static from(status: number, problem: Record<string, unknown>, retryAfter?: number): ApiError {
    const kind = typeof problem.code === "string" ? CLASSES[problem.code] : undefined;
    return new (kind ?? ApiError)(status, problem, retryAfter);
  }
}

/** 409: the key was used for another request; `jobId` holds it. */
export class IdempotencyConflict extends ApiError {}
/** 409: a submission with on_duplicate "reject" met a job of its unique key (`jobId`). */
export class DuplicateJobError extends ApiError {}
/** 429: over the type's throttle; not retried (sent again at once it is refused again). */
export class ThrottledError extends ApiError {}
/** 409: a signal to a job that has finished. */
export class JobFinished extends ApiError {}

const CLASSES: Record<string, typeof ApiError | undefined> = {
  idempotency_conflict: IdempotencyConflict,
  duplicate_job: DuplicateJobError,
  throttled: ThrottledError,
  job_finished: JobFinished,
};
