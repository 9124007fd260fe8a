"""``make correctness``: docs/correctness.md, each claim jobrelay makes with its conditions, the
tests and chaos profiles that show it, and the last figures of those profiles.

``python scripts/correctness.py [--profiles short,pg-failover-short] [--seed N] [--from FILE]
[--output docs/correctness.md]`` runs each profile (``python -m chaos``, on the servers of the
environment: ``make correctness`` runs it under ``scripts/servers.py run``), reads its summary
line (``chaos: seed=… key=value …``) and the independent checker's line (``checker: key=value
…``) if the run printed one, and writes the document. ``--from FILE`` runs nothing: it reads
summary lines saved from runs made by hand (the long profiles) instead. The figures of profiles
not run this time are read back from the JSON block at the end of the document, so running the
short profiles keeps the long ones' figures.

A figure that no line gave (the checker's counts before the checker existed) is shown as "—",
never guessed; a run that failed is shown FAILED.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
OUTPUT = ROOT / "docs" / "correctness.md"
DATA_MARKER = "<!-- correctness data: read back by scripts/correctness.py -->"
SUMMARY_PREFIX = "chaos: seed="
CHECKER_PREFIX = "checker:"
MISSING = "—"
RUN_TIMEOUT = 1800.0
# What CI can afford (about 8 minutes); the long profiles are run by hand, fed with --from.
DEFAULT_PROFILES = ("short", "pg-failover-short")
# The seeds the tests of tests/chaos/ run, so the figures are those CI checks.
SEEDS = {"short": 20240601, "pg-failover-short": 20261202}
FALLBACK_SEED = 2612
# The four counts of Jepsen's total-queue checker, from the independent checker's line.
COUNTS = ("lost", "recovered", "unexpected", "duplicated")
HOW_TO_RUN = {
    "short": "make correctness",
    "pg-failover-short": "make correctness",
    "long": "make chaos",
    "cluster-short": "JOBRELAY_RABBITMQ_NODES=3 make chaos CHAOS_ARGS='--profile cluster-short'",
    "cluster": "make chaos-cluster",
    "pg-failover": "make chaos-failover",
    "partitions-short": "make chaos-partitions",
    "partitions": "make chaos-partitions",
}

LOAD = ("short", "long")
FAILOVER = ("pg-failover-short", "pg-failover")
CLUSTER = ("cluster-short", "cluster")
PARTITIONS = ("partitions-short", "partitions")
EVERY = (*LOAD, *CLUSTER, *FAILOVER, *PARTITIONS)
SHORT_TEST = "tests/chaos/test_short_profile.py::test_short_chaos_profile_loses_and_doubles_nothing"
FAILOVER_TEST = (
    "tests/chaos/test_failover_profile.py::test_failover_chaos_profile_loses_and_doubles_nothing"
)


@dataclass(frozen=True)
class Claim:
    title: str
    conditions: str
    tests: tuple[str, ...]  # file::function, each checked to exist (tests/unit)
    profiles: tuple[str, ...]
    figures: tuple[str, ...]  # summary fields; "checker:NAME" for the checker's line


CLAIMS = (
    Claim(
        "An accepted job is never lost",
        "Accepted means answered 202 (or 200 for its key again): the job row and its outbox row "
        "committed before the answer. Across a PostgreSQL failover, lost 0 needs a synchronous "
        "standby: an asynchronous one loses commits the primary made just before it died "
        "([failover.md](failover.md#what-an-asynchronous-standby-loses)).",
        (
            "tests/integration/test_api_submission.py::"
            "test_a_failure_between_the_writes_leaves_no_job_no_outbox_row_no_event",
            "tests/integration/test_consumer_faults.py::"
            "test_postgres_restarted_in_the_middle_of_1000_jobs_every_job_succeeds_once",
            SHORT_TEST,
            FAILOVER_TEST,
        ),
        (*LOAD, *FAILOVER),
        ("accepted", "lost", "checker:lost", "checker:recovered", "ambiguous", "standby"),
    ),
    Claim(
        "One job per idempotency key",
        "Per client and key, while the job is kept (retention frees the key); a retry with the "
        "same key and the same request gets the same job, another request a 409.",
        (
            "tests/integration/test_api_submission.py::test_fifty_concurrent_identical_posts_make_one_job",
            "tests/integration/test_ambiguous_commit.py::"
            "test_a_submission_whose_answer_was_lost_is_retried_with_its_key_into_exactly_one_job",
        ),
        EVERY,
        (
            "duplicate_submissions",
            "ambiguous_commits",
            "checker:keys_with_two_jobs",
            "checker:unexpected",
        ),
    ),
    Claim(
        "A handler may run twice; its result is stored once",
        "At-least-once execution, exactly-once result: a redelivery or an expired lease runs the "
        "handler again, and only the attempt that holds the lease stores a result, before the ack.",
        (
            "tests/integration/test_consumer.py::test_two_concurrent_claims_of_one_job_have_exactly_one_owner",
            "tests/integration/test_consumer.py::"
            "test_a_consumer_that_died_after_storing_the_result_but_before_the_ack_is_not_run_again",
            "tests/integration/test_ambiguous_commit.py::"
            "test_through_the_broker_a_lost_completion_answer_leaves_one_result_and_an_empty_queue",
        ),
        EVERY,
        ("duplicate_results", "checker:duplicate_results", "checker:duplicated"),
    ),
    Claim(
        "No write by a stale lease",
        "Every worker write (result, retry, quarantine, heartbeat) is guarded by the attempt's "
        "lease token: once the lease expired and the job was claimed again, the old attempt "
        "writes nothing.",
        (
            "tests/integration/test_consumer.py::"
            "test_a_stale_lease_token_can_neither_complete_nor_retry_nor_quarantine",
            "tests/unit/test_transitions.py::test_a_fenced_transition_is_guarded_by_its_token",
        ),
        EVERY,
        ("checker:stale_writes",),
    ),
    Claim(
        "A handler's effects are idempotent only if the handler makes them so",
        "jobrelay stores a result once; an effect outside the database (a file, a call) happens "
        "again when the handler runs again, unless the handler checks for it first, as "
        "`catalog.export` (its report file) and `chaos.batch` (an effect per job, found when an "
        "earlier call made it) do.",
        (
            "tests/integration/test_consumer.py::"
            "test_catalog_export_crashed_between_writing_the_file_and_storing_the_result_leaves_one_file_and_one_result",
            "tests/integration/test_batch_handlers.py::test_a_consumer_stopped_while_its_batch_runs_loses_nothing",
        ),
        EVERY,
        ("duplicate_effects", "batch_calls", "batch_failed_elements", "checker:duplicated"),
    ),
    Claim(
        "Concurrency limits are never exceeded",
        "Per job type and concurrency key, counted from the claim to the attempt's end; a job "
        "found at the limit is held, not run.",
        (
            "tests/integration/test_execution_store_contract.py::"
            "test_a_concurrency_limit_lets_n_run_holds_the_next_and_a_freed_slot_lets_it_in",
            "tests/integration/test_execution_store_contract.py::"
            "test_a_job_whose_lease_expired_found_at_the_limit_is_held_queued_again",
        ),
        EVERY,
        ("limited_attempts", "limited_peak", "limit_exceeded", "checker:limit_exceeded"),
    ),
    Claim(
        "A sequence runs in order, one job at a time",
        "Per client and sequence key, in acceptance order; a quarantined job blocks the rest of "
        "its key until it is replayed or cancelled.",
        (
            "tests/integration/test_sequences.py::"
            "test_two_consumers_run_many_keys_each_in_order_and_never_two_of_a_key_at_once",
            "tests/integration/test_sequences.py::"
            "test_a_consumer_killed_in_a_sequence_s_job_the_next_waits_until_its_rerun_succeeded",
        ),
        EVERY,
        (
            "sequence_jobs",
            "sequence_overlaps",
            "sequence_order",
            "checker:sequence_overlaps",
            "checker:sequence_order",
        ),
    ),
    Claim(
        "A recorded durable step never runs again",
        "After its value was recorded; a step may run again when the attempt that ran it died "
        "before recording it (counted as `step_runs_before_recorded`, not a violation).",
        (
            "tests/integration/test_durable_execution.py::"
            "test_steps_recorded_by_attempt_1_are_not_run_again_by_the_retry_that_succeeds",
            "tests/chaos/test_durable_checks.py::test_a_step_run_again_after_it_was_recorded_is_found",
            "tests/chaos/test_durable_checks.py::"
            "test_a_step_run_by_an_attempt_that_died_before_recording_it_is_allowed",
        ),
        EVERY,
        (
            "steps_recorded",
            "step_runs",
            "step_runs_before_recorded",
            "step_run_again",
            "checker:step_run_again",
        ),
    ),
    Claim(
        "A signal is delivered once",
        "Sent with `jobrelay_signal` in the sender's transaction: returned to one wait of its "
        "job, once.",
        (
            "tests/integration/test_durable_execution.py::"
            "test_signals_sent_while_their_jobs_wait_or_fall_asleep_each_reach_their_wait_once",
            "tests/chaos/test_durable_checks.py::test_a_signal_returned_to_two_waits_is_found",
        ),
        EVERY,
        ("signals_sent", "signals_taken", "signal_returned_twice"),
    ),
    Claim(
        "The quarantine holds exactly the quarantined jobs",
        "One message per quarantined job once the dispatchers' maintenance has run (a surplus "
        "copy or a stale message is removed by it, [invariants.md](invariants.md)).",
        (
            "tests/acceptance/test_quarantine_keeper.py::"
            "test_finding9_the_dispatcher_leaves_exactly_one_message_per_quarantined_job",
            "tests/integration/test_regressions_chaos.py::"
            "test_a_quarantine_whose_nack_was_lost_still_dead_letters_its_message",
        ),
        EVERY,
        ("quarantined", "quarantine_messages", "wrongly_quarantined"),
    ),
    Claim(
        "Broker node faults and partitions lose nothing",
        "Quorum queues replicated on every node of a three-node cluster, publisher confirms "
        "before an outbox row counts as published, and a majority of the nodes reachable; a "
        "job's message may be delivered twice, its result is stored once. Under partitions "
        "the nodes run `pause_minority`, a node not back a minute after the heal is "
        "restarted, and a consumer not consuming for 20 s connects afresh; while no majority "
        "is reachable jobs wait (the delay per scenario is in "
        "[cluster.md](cluster.md#partitions)).",
        (
            "tests/cluster/test_cluster.py::test_the_work_and_quarantine_queues_have_a_replica_on_every_node",
            "tests/cluster/test_cluster.py::"
            "test_with_the_first_node_stopped_connections_go_to_the_second_and_move_there",
            "tests/chaos/test_partitions_profile.py::"
            "test_partitions_chaos_profile_loses_and_doubles_nothing",
            "tests/unit/test_consumer_reconnect.py::"
            "test_a_reopen_returns_at_once_though_the_consume_never_answers",
        ),
        (*CLUSTER, *PARTITIONS),
        (
            "rabbitmq_nodes",
            "node_faults",
            "partitions",
            "partition_max_latency",
            "lost",
            "duplicate_results",
            "checker:lost",
        ),
    ),
    Claim(
        "PostgreSQL is intact after a failover",
        "`pg_amcheck` (every heap table, every B-tree index with `--heapallindexed "
        "--parent-check`) on the run's database at the new primary, at the end of every run "
        "with primary faults ([failover.md](failover.md#integrity-after-failover)).",
        (
            FAILOVER_TEST,
            "tests/unit/test_chaos_integrity.py::test_a_corruption_report_is_one_finding_per_header",
        ),
        FAILOVER,
        ("primary_faults", "standby", "max_unwritable", "amcheck"),
    ),
)


# --- reading lines ------------------------------------------------------------------------------


def fields(line: str) -> dict[str, str]:
    """The ``key=value`` pairs of a summary or checker line (words without ``=`` are skipped)."""
    found = {}
    for word in line.split():
        key, sep, value = word.partition("=")
        if sep and key:
            found[key] = value
    return found


def checker_fields(line: str) -> dict[str, str] | None:
    """The fields of the independent checker's line (``checker: …``, or ``chaos: checker: …``
    as the runner may relay it); None for another line."""
    for prefix in ("chaos: " + CHECKER_PREFIX, CHECKER_PREFIX):
        if line.startswith(prefix):
            return fields(line.removeprefix(prefix))
    return None


def records_from(text: str, *, exit_code: int | None = None, source: str) -> list[dict[str, Any]]:
    """One record per summary line of ``text``. A checker line goes with the summary line of its
    profile and seed when it names them, else with the next summary line (the last one when
    none follows)."""
    summaries: list[dict[str, str]] = []
    checkers: list[tuple[int, dict[str, str]]] = []  # (index of the next summary, fields)
    for raw in text.splitlines():
        line = raw.strip()
        checked = checker_fields(line)
        if checked is not None:
            checkers.append((len(summaries), checked))
        elif line.startswith(SUMMARY_PREFIX):
            found = fields(line.removeprefix("chaos:"))
            if "violations" in found:  # the run's first line names its seed too: not a summary
                summaries.append(found)
    checker_of: dict[int, dict[str, str]] = {}
    for following, found in checkers:
        named = [
            n
            for n, summary in enumerate(summaries)
            if found.get("seed") == summary.get("seed")
            and found.get("profile") == summary.get("profile")
        ]
        index = named[0] if named else min(following, len(summaries) - 1)
        if index >= 0:
            checker_of[index] = found
    return [
        record(summary, checker_of.get(n), exit_code=exit_code, source=source)
        for n, summary in enumerate(summaries)
    ]


def record(
    summary: dict[str, str], checker: dict[str, str] | None, *, exit_code: int | None, source: str
) -> dict[str, Any]:
    return {
        "profile": summary.get("profile", "?"),
        "seed": summary.get("seed", "?"),
        "passed": passed(summary, checker, exit_code),
        "summary": summary,
        "checker": checker,
        "recorded": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d"),
        "source": source,
    }


def passed(summary: dict[str, str], checker: dict[str, str] | None, exit_code: int | None) -> bool:
    """A run passed when it exited 0 (if we ran it), its own checks found no violation, and
    the independent checker (if it ran) counted nothing lost, unexpected or duplicated."""
    if exit_code not in (None, 0) or summary.get("violations") != "0":
        return False
    failing = [name for name in COUNTS if name != "recovered"]
    return checker is None or all(checker.get(name, "0") == "0" for name in failing)


# --- the document -------------------------------------------------------------------------------


def figure(run: dict[str, Any], name: str) -> str:
    source, _, key = name.rpartition(":")
    found = (run.get("checker") or {}) if source == "checker" else run["summary"]
    return str(found.get(key, MISSING))


def verdict(run: dict[str, Any]) -> str:
    return "passed" if run["passed"] else "**FAILED**"


def faults_by_kind(run: dict[str, Any]) -> str:
    faults = run["summary"].get("faults")
    return MISSING if faults is None else faults.replace(",", ", ").replace(":", " ")


def runs_table(runs: dict[str, dict[str, Any]]) -> list[str]:
    lines = [
        "| profile | seed | verdict | jobs | faults by kind | lost | recovered | unexpected "
        "| duplicated | recorded |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for profile in sorted(runs, key=lambda p: (EVERY.index(p) if p in EVERY else len(EVERY), p)):
        run = runs[profile]
        counts = " | ".join(figure(run, f"checker:{name}") for name in COUNTS)
        lines.append(
            f"| `{profile}` | {run['seed']} | {verdict(run)} | {figure(run, 'jobs')} "
            f"| {faults_by_kind(run)} | {counts} | {run['recorded']} |"
        )
    return lines


def claim_section(number: int, claim: Claim, runs: dict[str, dict[str, Any]]) -> list[str]:
    lines = [f"## {number}. {claim.title}", "", f"**Conditions.** {claim.conditions}", ""]
    lines.append("**Tests.**")
    lines += [f"- `{test}`" for test in claim.tests]
    lines += ["", "**Chaos profiles and their last figures.**"]
    for profile in claim.profiles:
        run = runs.get(profile)
        if run is None:
            how = HOW_TO_RUN.get(profile, f"python -m chaos --profile {profile}")
            lines.append(f"- `{profile}`: not recorded yet (`{how}`)")
            continue
        shown = " ".join(f"{name}={figure(run, name)}" for name in claim.figures)
        lines.append(f"- `{profile}` (seed {run['seed']}, {verdict(run)}): {shown}")
    return [*lines, ""]


def render(runs: dict[str, dict[str, Any]]) -> str:
    lines = [
        "# Correctness: what jobrelay claims, and what shows it",
        "",
        "Written by `make correctness` (`scripts/correctness.py`); do not edit by hand. Each "
        "claim with its conditions, the tests that show it (`file::function`), and the last "
        "figures of the chaos profiles that check it under faults: the runner's own checks "
        "(`chaos/checks.py`) and, where the run printed its line, the independent checker's "
        "counts ([history.md](history.md)). A figure no run reported yet is shown as "
        f"{MISSING}. CI's short profiles are re-run by `make correctness`; the long ones are "
        "run by hand and their summary lines fed in with "
        "`python scripts/correctness.py --from FILE`.",
        "",
        "## The runs",
        "",
        *runs_table(runs),
        "",
        "lost, recovered, unexpected and duplicated are the four counts of Jepsen's total-queue "
        "checker, as the independent checker counts them from the run's history.",
        "",
    ]
    for number, claim in enumerate(CLAIMS, start=1):
        lines += claim_section(number, claim, runs)
    data = json.dumps({"runs": runs}, indent=1, sort_keys=True)
    lines += [DATA_MARKER, "```json", data, "```", ""]
    return "\n".join(lines)


def recorded(document: str) -> dict[str, dict[str, Any]]:
    """The runs the document's JSON block holds ({} for none)."""
    _, marker, rest = document.partition(DATA_MARKER)
    if not marker:
        return {}
    block = rest.split("```json", 1)[-1].split("```", 1)[0]
    runs: dict[str, dict[str, Any]] = json.loads(block)["runs"]
    return runs


# --- running profiles ---------------------------------------------------------------------------


def run_profile(profile: str, seed: int, workdir: Path) -> list[dict[str, Any]]:
    """One ``python -m chaos`` run in ``workdir``/<profile> (which must not exist yet); its
    output is kept in ``workdir``/<profile>.log."""
    print(f"correctness: running {profile} with seed {seed}", file=sys.stderr, flush=True)
    command = [sys.executable, "-m", "chaos", "--profile", profile, "--seed", str(seed)]
    command += ["--workdir", str(workdir / profile)]
    done = subprocess.run(
        command,
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT,
    )
    log = workdir / f"{profile}.log"
    log.write_text(done.stdout + done.stderr)
    found = records_from(
        done.stdout + "\n" + done.stderr, exit_code=done.returncode, source=log.name
    )
    status = "passed" if done.returncode == 0 else f"FAILED (exit {done.returncode})"
    print(f"correctness: {profile} {status}; output in {log}", file=sys.stderr, flush=True)
    if not found:  # a run that died before its summary still shows, as FAILED
        found = [
            record({"profile": profile, "seed": str(seed)}, None, exit_code=1, source=log.name)
        ]
    return found


def known_profiles() -> list[str]:
    sys.path.insert(0, str(ROOT))
    from chaos.runner import PROFILES

    return list(PROFILES)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="scripts/correctness.py", description=__doc__)
    parser.add_argument("--profiles", default=",".join(DEFAULT_PROFILES), help="comma-separated")
    parser.add_argument("--seed", type=int, help="one seed for every profile run")
    parser.add_argument(
        "--from", dest="source", type=Path, help="saved summary lines; runs nothing"
    )
    parser.add_argument("--output", type=Path, default=OUTPUT)
    args = parser.parse_args(argv)
    profiles = [p.strip() for p in args.profiles.split(",") if p.strip()]
    unknown = sorted(set(profiles) - set(known_profiles()))
    if unknown:
        print(f"correctness: no chaos profile {', '.join(unknown)}", file=sys.stderr)
        return 2
    try:
        runs = recorded(args.output.read_text()) if args.output.exists() else {}
    except (ValueError, KeyError) as error:
        print(
            f"correctness: the JSON block of {args.output} is unreadable: {error}", file=sys.stderr
        )
        return 2
    if args.source is not None:
        try:
            text = args.source.read_text()
        except OSError as error:
            print(f"correctness: cannot read {args.source}: {error.strerror}", file=sys.stderr)
            return 2
        new = records_from(text, source=args.source.name)
        if not new:
            print(f"correctness: no `{SUMMARY_PREFIX}` line in {args.source}", file=sys.stderr)
            return 2
    else:
        # A new directory each time: a run's checks read every file of its results directory,
        # and an earlier run's files there would be effects of no job of this one.
        stamp = datetime.datetime.now(datetime.UTC).strftime("%Y%m%dT%H%M%S")
        workdir = ROOT / ".local" / "correctness" / stamp
        workdir.mkdir(parents=True)
        new = []
        for profile in profiles:
            seed = args.seed if args.seed is not None else SEEDS.get(profile, FALLBACK_SEED)
            new += run_profile(profile, seed, workdir)
    runs |= {run["profile"]: run for run in new}
    args.output.write_text(render(runs))
    print(f"correctness: wrote {args.output}", file=sys.stderr)
    return 0 if all(run["passed"] for run in new) else 1


if __name__ == "__main__":
    sys.exit(main())
