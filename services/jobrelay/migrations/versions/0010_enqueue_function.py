"""jobrelay_enqueue(...): a job enqueued from plain SQL, in any language's own transaction
(docs/submitting.md, "From any language: SQL").

Functions, each the SQL twin of a piece of the Python accept (``db/accept.py``):

- ``jobrelay_json_number(numeric)`` (with ``jobrelay_float_digits`` and
  ``jobrelay_reads_back``): a JSON number as Python's ``json`` writes what it read (an integer
  as is, a number with a fraction as ``repr`` of its float);
- ``jobrelay_canonical_json(jsonb)``: ``core/fingerprint.py``'s ``canonical_json`` of the
  document (keys sorted by code point, no spaces, non-ASCII as is);
- ``jobrelay_request_hash(type, payload, run_at, priority)``: ``request_hash_of_json`` of the
  request, so that one key used once through Python and once through SQL for the same request
  is one job, not a conflict;
- ``jobrelay_type_defaults(type)``: the ``max_attempts`` and ``priority`` a submission of the
  type gets when it names none: here 3 and 0; migration 0011 has it read the types the
  consumers registered;
- ``jobrelay_enqueue(client, type, payload, idempotency_key, run_at, priority)``: the checks of
  ``jobrelay.enqueue`` (``transactional.py``), then ACCEPT_JOB's job + outbox row + ``received``
  event in one statement (the outbox trigger of 0001 notifies the dispatcher), and JOB_BY_KEY
  when the key was taken. Errors start with a code word (``invalid_request``,
  ``unknown_client``, ``idempotency_conflict``).

A frozen copy, as every migration is: the limits written into the body are those of
``history.py`` (``*_0010``), not the live ``core/bounds.py``; a change of either the accept or the
limits comes with a new revision that replaces the function.

Revision ID: 0010
Revises: 0009
Create Date: 2026-12-03
"""

from alembic import op

from jobrelay.db.history import (
    DEFAULT_MAX_ATTEMPTS_0010,
    IDEMPOTENCY_KEY_MAX_0010,
    PRIORITY_RANGE_0010,
    PYTHON_INT_DIGITS_MAX_0010,
    TYPE_NAME_MAX_0010,
)

revision = "0010"
down_revision = "0009"  # no branch labels, no dependencies

PRIORITY_MIN, PRIORITY_MAX = PRIORITY_RANGE_0010

# 2**1024 - 2**970, from which a decimal rounds to infinity as a double; half the smallest
# subnormal, 2**-1075, to which and below it rounds to 0.0 (cut to 60 digits).
DOUBLE_OVERFLOW = "1.79769313486231580793728971405303415079934132710037826936174e308"
DOUBLE_UNDERFLOW = "2.47032822920623272088284396434110686182529901307162382212793e-324"

# The most digits of an integer Python's json reads: jsonb holds longer ones, which the
# consumer and the API's view would then fail to read, and jobrelay.enqueue to write.
PYTHON_INT_DIGITS_MAX = PYTHON_INT_DIGITS_MAX_0010

# Whether a decimal reads back as the double (false past the doubles: the cast would fail).
READS_BACK = f"""
CREATE OR REPLACE FUNCTION jobrelay_reads_back(value numeric, x float8) RETURNS boolean
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
AS $$
    SELECT CASE WHEN abs(value) >= {DOUBLE_OVERFLOW} THEN false ELSE value::float8 = x END
$$
"""

# The shortest digits that read back as the double, and where its decimal point goes (the value
# is 0.<digits> times 10 to the power dot), as Python's repr() finds them: below 2**53 they are
# PostgreSQL's own float8 text with extra_float_digits above 0 (whatever the caller's session
# set); from 2**53 on, where every double is an integer, PostgreSQL writes 17 digits where 16
# may do, so they are found here from the exact integer (its mantissa and exponent bits): the
# fewest digits whose nearest rounding, or the other neighbour, reads back as the double.
FLOAT_DIGITS = """
CREATE OR REPLACE FUNCTION jobrelay_float_digits(x float8, OUT digits text, OUT dot int)
LANGUAGE plpgsql IMMUTABLE STRICT PARALLEL SAFE
SET extra_float_digits = 1
AS $$
DECLARE
    shortest text := ltrim(abs(x)::text, '-');  -- e.g. 0.0001, 123.5, 1e-07, 1e+300
    mantissa text := split_part(shortest, 'e', 1);
    bits bigint;
    exact numeric;
    unit numeric;
    candidate numeric;
BEGIN
    IF abs(x) < 9007199254740992 THEN
        dot := length(split_part(mantissa, '.', 1))
               + coalesce(nullif(split_part(shortest, 'e', 2), '')::int, 0);
        digits := replace(mantissa, '.', '');
        dot := dot - (length(digits) - length(ltrim(digits, '0')));
        digits := rtrim(ltrim(digits, '0'), '0');
        RETURN;
    END IF;
    bits := ('x' || encode(float8send(abs(x)), 'hex'))::bit(64)::bigint;
    exact := round(((bits & 4503599627370495) | 4503599627370496)::numeric
                   * 2::numeric ^ ((bits >> 52) - 1075));  -- an integer, written without scale
    FOR k IN 1..17 LOOP
        unit := ('1' || repeat('0', length(exact::text) - k))::numeric;
        candidate := round(exact / unit) * unit;
        IF NOT jobrelay_reads_back(candidate, abs(x)) THEN
            candidate := candidate + CASE WHEN candidate < exact THEN unit ELSE -unit END;
        END IF;
        IF jobrelay_reads_back(candidate, abs(x)) THEN
            dot := length(candidate::text);
            digits := rtrim(candidate::text, '0');
            RETURN;
        END IF;
    END LOOP;
END
$$
"""

# Python's json reads a number with a fraction or an exponent as a float and writes it back as
# repr() does; jsonb keeps a numeric, whose text has a fraction exactly when the number had one
# left after its exponent ("1.50" stays "1.50", "1e3" is "1000"). So: no fraction, an integer
# (Python's int of any size); a fraction, the float's shortest digits laid out as repr() lays
# them: an exponent when the decimal point is more than 16 digits right or 4 left of the first.
# A number Python cannot read (an integer past its digits, a fraction past a double) is refused.
JSON_NUMBER = f"""
CREATE OR REPLACE FUNCTION jobrelay_json_number(number numeric) RETURNS text
LANGUAGE plpgsql IMMUTABLE STRICT PARALLEL SAFE
AS $$
DECLARE
    sign text := CASE WHEN number < 0 THEN '-' ELSE '' END;
    digits text;
    dot int;
    exponent int;
BEGIN
    IF scale(number) = 0 THEN
        IF length(abs(number)::text) > {PYTHON_INT_DIGITS_MAX} THEN
            RAISE EXCEPTION USING ERRCODE = 'numeric_value_out_of_range',
                MESSAGE = 'invalid_request: payload holds an integer of more than '
                          '{PYTHON_INT_DIGITS_MAX} digits',
                DETAIL = 'Python reads none longer from JSON: no consumer could read the job.';
        END IF;
        RETURN number::text;
    END IF;
    IF abs(number) >= {DOUBLE_OVERFLOW} THEN
        RAISE EXCEPTION USING ERRCODE = 'numeric_value_out_of_range',
            MESSAGE = 'invalid_request: payload holds a number beyond the range of a double',
            DETAIL = 'Python reads it as infinity, which jsonb cannot store.';
    END IF;
    IF abs(number) <= {DOUBLE_UNDERFLOW} THEN
        RETURN '0.0';
    END IF;
    SELECT f.digits, f.dot INTO digits, dot FROM jobrelay_float_digits(number::float8) AS f;
    IF dot <= -4 OR dot > 16 THEN
        exponent := dot - 1;
        RETURN sign || left(digits, 1)
            || CASE WHEN length(digits) > 1 THEN '.' || substr(digits, 2) ELSE '' END
            || CASE WHEN exponent < 0 THEN 'e-' ELSE 'e+' END
            || CASE WHEN abs(exponent) < 10 THEN '0' ELSE '' END || abs(exponent)::text;
    ELSIF dot <= 0 THEN
        RETURN sign || '0.' || repeat('0', -dot) || digits;
    ELSIF dot >= length(digits) THEN
        RETURN sign || digits || repeat('0', dot - length(digits)) || '.0';
    END IF;
    RETURN sign || left(digits, dot) || '.' || substr(digits, dot + 1);
END
$$
"""

# json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False): jsonb writes
# strings, true, false and null as Python does (the same escapes: \" \\ \b \f \n \r \t,
# \u00XX in lowercase for other control characters, all else as is), but sorts an object's
# keys by length first and puts a space after ":" and ",". So objects and arrays are written
# again here; UTF-8 bytes in "C" order are code points in order, as Python sorts str.
CANONICAL_JSON = """
CREATE OR REPLACE FUNCTION jobrelay_canonical_json(document jsonb) RETURNS text
LANGUAGE plpgsql IMMUTABLE STRICT PARALLEL SAFE
AS $$
BEGIN
    CASE jsonb_typeof(document)
    WHEN 'object' THEN
        RETURN '{' || coalesce((
            SELECT string_agg(to_json(key)::text || ':' || jobrelay_canonical_json(value), ','
                              ORDER BY key COLLATE "C")
            FROM jsonb_each(document)), '') || '}';
    WHEN 'array' THEN
        RETURN '[' || coalesce((
            SELECT string_agg(jobrelay_canonical_json(element), ',' ORDER BY ordinal)
            FROM jsonb_array_elements(document) WITH ORDINALITY AS e(element, ordinal)), '')
            || ']';
    WHEN 'number' THEN
        RETURN jobrelay_json_number(document::numeric);
    ELSE
        RETURN document::text;
    END CASE;
END
$$
"""

# request_hash_of_json(type, canonical payload, schedule, flow): the document's fields in
# sorted order ("payload", "priority" when given, "schedule" when run_at is, "type"), the due
# time as Python's UTC isoformat() ("2026-12-24T18:00:00+00:00", ".ffffff" only when there are
# microseconds). to_char reads neither DateStyle nor TimeZone here: only STABLE for its kind.
REQUEST_HASH = """
CREATE OR REPLACE FUNCTION jobrelay_request_hash(
    job_type text, payload jsonb, run_at timestamptz, priority int
) RETURNS text
LANGUAGE sql STABLE PARALLEL SAFE
AS $$
    SELECT encode(sha256(convert_to(
        '{"payload":' || jobrelay_canonical_json(payload)
        || CASE WHEN priority IS NULL THEN '' ELSE ',"priority":' || priority END
        || CASE WHEN run_at IS NULL THEN '' ELSE
               ',"schedule":{"run_at":"'
               || to_char(utc, 'YYYY-MM-DD"T"HH24:MI:SS')
               || CASE WHEN date_trunc('second', utc) = utc THEN '' ELSE to_char(utc, '.US') END
               || '+00:00"}'
           END
        || ',"type":' || to_json(job_type)::text || '}', 'UTF8')), 'hex')
    FROM (SELECT run_at AT TIME ZONE 'UTC' AS utc) AS due
$$
"""

# What a submission of a type gets when it names no priority (and never names max_attempts,
# which is not an argument): DEFAULT_MAX_ATTEMPTS and 0 here, the registered type's from 0011.
TYPE_DEFAULTS = f"""
CREATE OR REPLACE FUNCTION jobrelay_type_defaults(job_type text, OUT max_attempts int,
                                                  OUT priority int)
LANGUAGE sql STABLE
AS $$ SELECT {DEFAULT_MAX_ATTEMPTS_0010}, 0 $$
"""

# The arguments checked as jobrelay.enqueue checks them (a NULL is never taken for "not
# given", except for run_at and priority), then the accept of db/accept.py: ACCEPT_JOB, and
# JOB_BY_KEY when it inserted nothing, tried again when the key's job was deleted in between.
# The id is a UUIDv7 as core/ids.py makes one: the millisecond, then random bits (those of a
# v4 with its version 4 turned into 7).
ENQUEUE = """
CREATE OR REPLACE FUNCTION jobrelay_enqueue(
    client text,
    type text,
    payload jsonb,
    idempotency_key text,
    run_at timestamptz DEFAULT NULL,
    priority int DEFAULT NULL
) RETURNS uuid
LANGUAGE plpgsql VOLATILE
AS $$
#variable_conflict use_column
DECLARE
    fingerprint text;
    by_id uuid;
    the_client record;
    new_id uuid;
    defaults record;
    inserted uuid;
    held record;
BEGIN
    PERFORM jobrelay_enqueue_check(jobrelay_enqueue.client, jobrelay_enqueue.type,
                                   jobrelay_enqueue.payload, jobrelay_enqueue.idempotency_key,
                                   jobrelay_enqueue.run_at, jobrelay_enqueue.priority);
    IF jobrelay_enqueue.client ~* '^[0-9a-f]{8}-?([0-9a-f]{4}-?){3}[0-9a-f]{12}$' THEN
        by_id := CAST(jobrelay_enqueue.client AS uuid);  -- a form the cast always takes
    END IF;
    SELECT id, disabled_at IS NOT NULL AS disabled INTO the_client
    FROM clients
    WHERE id = by_id OR name = jobrelay_enqueue.client
    ORDER BY (id = by_id) IS TRUE DESC  -- CLIENT_BY_ID_OR_NAME: the id wins over a name
    LIMIT 1;
    IF NOT FOUND OR the_client.disabled THEN
        RAISE EXCEPTION USING ERRCODE = 'undefined_object',
            MESSAGE = format('unknown_client: jobrelay client %s %s',
                             quote_literal(jobrelay_enqueue.client),
                             CASE WHEN FOUND THEN 'is disabled' ELSE 'does not exist' END);
    END IF;
    SELECT * INTO defaults FROM jobrelay_type_defaults(jobrelay_enqueue.type);
    fingerprint := jobrelay_request_hash(jobrelay_enqueue.type, jobrelay_enqueue.payload,
                                         jobrelay_enqueue.run_at, jobrelay_enqueue.priority);
    FOR tried IN 1..3 LOOP
        new_id := encode(set_bit(set_bit(overlay(uuid_send(gen_random_uuid())
                      PLACING substring(int8send(floor(extract(epoch FROM clock_timestamp())
                                                       * 1000)::bigint) FROM 3)
                      FROM 1 FOR 6), 52, 1), 53, 1), 'hex')::uuid;
        WITH j AS (
            INSERT INTO jobs (id, client_id, idempotency_key, request_hash, type, payload,
                              max_attempts, run_at, available_at, priority)
            VALUES (new_id, the_client.id, jobrelay_enqueue.idempotency_key, fingerprint,
                    jobrelay_enqueue.type, jobrelay_enqueue.payload, defaults.max_attempts,
                    jobrelay_enqueue.run_at, coalesce(jobrelay_enqueue.run_at, now()),
                    coalesce(jobrelay_enqueue.priority, defaults.priority))
            ON CONFLICT DO NOTHING
            RETURNING id, available_at, priority, client_id, type
        ), new_outbox AS (
            INSERT INTO outbox (job_id, available_at, priority, client_id, type)
            SELECT id, available_at, priority, client_id, type FROM j
        ), new_event AS (
            INSERT INTO job_events (job_id, event, attempt) SELECT id, 'received', 0 FROM j
        )
        SELECT id INTO inserted FROM j;
        IF inserted IS NOT NULL THEN
            RETURN inserted;
        END IF;
        SELECT id, request_hash INTO held
        FROM jobs
        WHERE client_id = the_client.id AND idempotency_key = jobrelay_enqueue.idempotency_key;
        IF FOUND AND held.request_hash = fingerprint THEN
            RETURN held.id;
        ELSIF FOUND THEN
            RAISE EXCEPTION USING ERRCODE = 'unique_violation',
                MESSAGE = format('idempotency_conflict: the key %s was used for another type, '
                                 'payload, run_at or priority',
                                 quote_literal(jobrelay_enqueue.idempotency_key)),
                DETAIL = 'job_id=' || held.id,
                HINT = 'The same request under the key returns that job; '
                       'another request needs another key.';
        END IF;
    END LOOP;
    RAISE EXCEPTION USING ERRCODE = 'serialization_failure',
        MESSAGE = 'retry: the job holding the key was deleted between insert and read, '
                  'three times; retry the transaction';
END
$$
"""

# The checks, apart so that the accept above reads as the accept. Each error names the argument
# and what it may be; the SQLSTATE is the standard one for the kind of mistake.
ENQUEUE_CHECK = f"""
CREATE OR REPLACE FUNCTION jobrelay_enqueue_check(
    client text, job_type text, payload jsonb, idempotency_key text,
    run_at timestamptz, priority int
) RETURNS void
LANGUAGE plpgsql STABLE PARALLEL SAFE
AS $$
DECLARE
    missing text := CASE
        WHEN client IS NULL THEN 'client'
        WHEN job_type IS NULL THEN 'type'
        WHEN payload IS NULL THEN 'payload'
        WHEN idempotency_key IS NULL THEN 'idempotency_key'
    END;
BEGIN
    IF missing IS NOT NULL THEN
        RAISE EXCEPTION USING ERRCODE = 'null_value_not_allowed',
            MESSAGE = format('invalid_request: %s must not be NULL', missing);
    END IF;
    IF char_length(idempotency_key) NOT BETWEEN 1 AND {IDEMPOTENCY_KEY_MAX_0010}
       OR idempotency_key ~ '[^!-~]' THEN
        RAISE EXCEPTION USING ERRCODE = 'invalid_parameter_value',
            MESSAGE = 'invalid_request: idempotency_key must be 1 to {IDEMPOTENCY_KEY_MAX_0010} '
                      'visible ASCII characters (0x21-0x7E)';
    END IF;
    IF char_length(job_type) NOT BETWEEN 1 AND {TYPE_NAME_MAX_0010} THEN
        RAISE EXCEPTION USING ERRCODE = 'invalid_parameter_value',
            MESSAGE = 'invalid_request: type must be a text of 1 to {TYPE_NAME_MAX_0010} '
                      'characters';
    END IF;
    IF jsonb_typeof(payload) <> 'object' THEN
        RAISE EXCEPTION USING ERRCODE = 'invalid_parameter_value',
            MESSAGE = format('invalid_request: payload must be a JSON object, not %s',
                             CASE jsonb_typeof(payload) WHEN 'array' THEN 'an array'
                                  WHEN 'null' THEN 'null' ELSE 'a ' || jsonb_typeof(payload)
                             END);
    END IF;
    IF priority NOT BETWEEN {PRIORITY_MIN} AND {PRIORITY_MAX} THEN
        RAISE EXCEPTION USING ERRCODE = 'numeric_value_out_of_range',
            MESSAGE = format('invalid_request: priority must be from {PRIORITY_MIN} to '
                             '{PRIORITY_MAX} (or NULL for the type''s default), not %s', priority);
    END IF;
    IF NOT isfinite(run_at)
       OR extract(year FROM run_at AT TIME ZONE 'UTC') NOT BETWEEN 1 AND 9999 THEN
        RAISE EXCEPTION USING ERRCODE = 'datetime_field_overflow',
            MESSAGE = 'invalid_request: run_at must be a time in the years 1 to 9999 '
                      '(or NULL for now)';
    END IF;
END
$$
"""

FUNCTIONS = {
    "jobrelay_reads_back(numeric, float8)": READS_BACK,
    "jobrelay_float_digits(float8)": FLOAT_DIGITS,
    "jobrelay_json_number(numeric)": JSON_NUMBER,
    "jobrelay_canonical_json(jsonb)": CANONICAL_JSON,
    "jobrelay_request_hash(text, jsonb, timestamptz, int)": REQUEST_HASH,
    "jobrelay_enqueue_check(text, text, jsonb, text, timestamptz, int)": ENQUEUE_CHECK,
    "jobrelay_type_defaults(text)": TYPE_DEFAULTS,
    "jobrelay_enqueue(text, text, jsonb, text, timestamptz, int)": ENQUEUE,
}

ENQUEUE_COMMENT = (
    "COMMENT ON FUNCTION jobrelay_enqueue(text, text, jsonb, text, timestamptz, int) IS "
    "'A job of type with payload for client (name or id) under idempotency_key, written in "
    "the caller''s transaction; returns its id (docs/submitting.md, From any language: SQL)'"
)


# Each function finds jobrelay's tables and its sibling functions in the schema the migrations
# made them in, whatever the caller's search_path: a service whose path leads with its own
# schema (which may well have a "jobs" table) calls public.jobrelay_enqueue and still writes
# jobrelay's rows. pg_temp last: a temporary table cannot stand in for one of them either.
# Done in SQL, not with the schema read here in Python, so that offline (--sql) output has it.
PIN_SEARCH_PATH = f"""
DO $$
DECLARE
    signature text;
BEGIN
    FOREACH signature IN ARRAY ARRAY[{", ".join(f"'{signature}'" for signature in FUNCTIONS)}]
    LOOP
        EXECUTE format('ALTER FUNCTION %I.%s SET search_path = pg_catalog, %I, pg_temp',
                       current_schema(), signature, current_schema());
    END LOOP;
END
$$
"""


def upgrade() -> None:
    for definition in FUNCTIONS.values():
        op.execute(definition)
    op.execute(PIN_SEARCH_PATH)
    op.execute(ENQUEUE_COMMENT)


def downgrade() -> None:
    for signature in reversed(FUNCTIONS):
        op.execute(f"DROP FUNCTION {signature}")
