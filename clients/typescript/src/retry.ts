// When a request is sent again and how long the client waits first: the Python client's
// _retry.py. UNSENT: the server did not act (connection refused, 429, 503), any request may be
// sent again. AMBIGUOUS: it may have acted (the connection broke after the request went out, a
// proxy's 502/504): only a repeatable request (a submission with its same key, a read).

export type Failure = "unsent" | "ambiguous";

const RETRY_STATUSES: Record<number, Failure | undefined> = {
  429: "unsent", // rate_limited (a type's `throttled` is excluded by the caller)
  503: "unsent", // overloaded, database_unavailable, a proxy with no upstream
  502: "ambiguous",
  504: "ambiguous",
};

export function statusFailure(status: number): Failure | undefined {
  return RETRY_STATUSES[status];
}

// Errors of a connection that never carried the request (undici's and the system's codes).
const UNSENT_CODES = new Set(["ECONNREFUSED", "ENOTFOUND", "EAI_AGAIN", "UND_ERR_CONNECT_TIMEOUT"]);

/** The kind of failure a thrown fetch error is: undici wraps the system's in `cause`. */
export function fetchFailure(error: unknown): Failure {
  const cause = (error as { cause?: { code?: string } } | undefined)?.cause;
  return cause?.code !== undefined && UNSENT_CODES.has(cause.code) ? "unsent" : "ambiguous";
}

/** Seconds from a Retry-After header: whole seconds or an HTTP date (past: 0). */
export function parseRetryAfter(value: string | null, now: number = Date.now()): number | undefined {
  if (value === null) return undefined;
  const text = value.trim();
  if (/^\d+$/.test(text)) return Number(text);
  const when = Date.parse(text);
  return Number.isNaN(when) ? undefined : Math.max(0, (when - now) / 1000);
}

export interface RetryOptions {
  /** Further tries after the first (5). */
  retries?: number;
  /** Seconds of the first backoff, doubling up to backoffMax (0.5 and 8). */
  backoffBase?: number;
  backoffMax?: number;
  /** At most this long a Retry-After is waited (60 s). */
  retryAfterMax?: number;
}

export class RetryPolicy {
  readonly retries: number;
  readonly backoffBase: number;
  readonly backoffMax: number;
  readonly retryAfterMax: number;

  constructor(options: RetryOptions = {}) {
    this.retries = options.retries ?? 5;
    this.backoffBase = options.backoffBase ?? 0.5;
    this.backoffMax = options.backoffMax ?? 8;
    this.retryAfterMax = options.retryAfterMax ?? 60;
    if (!(this.retries >= 0)) throw new RangeError("retries must be 0 or more");
  }

  /** Seconds before retry number `retry` (1-based), or undefined when the failure is final. */
  wait(retry: number, failure: Failure | undefined, repeatable: boolean, retryAfter?: number): number | undefined {
    if (failure === undefined || retry > this.retries) return undefined;
    if (failure === "ambiguous" && !repeatable) return undefined;
    if (retryAfter !== undefined) return Math.min(retryAfter, this.retryAfterMax);
    // Jittered: uniform in [c/2, c], c doubling from backoffBase up to backoffMax.
    const ceiling = Math.min(this.backoffBase * 2 ** (retry - 1), this.backoffMax);
    return ceiling / 2 + (Math.random() * ceiling) / 2;
  }
}
