"""The chaos run's limit check (chaos/checks.py) on made-up journals: it must find attempts of
one key running over the limit, and only those."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from chaos.checks import JournalEntry, attempts_from_journal, limit_excesses

T0 = datetime(2024, 6, 1, 12, 0, tzinfo=UTC)


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def attempt(
    job_id: str, start: float, end: float, end_event: str = "succeeded"
) -> list[JournalEntry]:
    return [
        JournalEntry(job_id, "claimed", 1, at(start)),
        JournalEntry(job_id, end_event, 1, at(end)),
    ]


def check(journal: list[JournalEntry], keys: dict[str, str], limit: int = 2) -> tuple[int, int]:
    attempts = attempts_from_journal(journal, keys, {})
    excesses, peak = limit_excesses(attempts, limit)
    return len(excesses), peak


def test_three_overlapping_attempts_of_one_key_under_a_limit_of_two_are_one_violation() -> None:
    journal = attempt("a", 0, 10) + attempt("b", 1, 10) + attempt("c", 2, 3)

    assert check(journal, {"a": "k", "b": "k", "c": "k"}) == (1, 3)


def test_the_violation_names_the_attempts_running_at_that_moment() -> None:
    journal = attempt("a", 0, 10) + attempt("b", 1, 10) + attempt("c", 2, 3)
    attempts = attempts_from_journal(journal, {"a": "k", "b": "k", "c": "k"}, {})

    [excess] = limit_excesses(attempts, 2)[0]

    assert excess.key == "k" and excess.at == at(2)
    assert [a.job_id for a in excess.running] == ["a", "b", "c"]


def test_touching_attempts_do_not_overlap() -> None:
    journal = attempt("a", 0, 5) + attempt("b", 0, 5) + attempt("c", 5, 9) + attempt("d", 5, 9)

    assert check(journal, {"a": "k", "b": "k", "c": "k", "d": "k"}) == (0, 2)


def test_attempts_of_other_keys_do_not_count_together() -> None:
    journal = attempt("a", 0, 10) + attempt("b", 1, 10) + attempt("c", 2, 3)

    assert check(journal, {"a": "k", "b": "k", "c": "other"}) == (0, 2)


def test_an_attempt_ends_at_its_own_lease_expiry_not_at_a_later_attempts_end() -> None:
    # Job a's first attempt lost its lease at 2 (re-claimed: attempt 2 from 2 to 9); b and c
    # ran from 3: a's first attempt no longer counted, so two at most.
    journal = [
        JournalEntry("a", "claimed", 1, at(0)),
        JournalEntry("a", "lease_expired", 1, at(2)),
        JournalEntry("a", "claimed", 2, at(2)),
        JournalEntry("a", "succeeded", 2, at(9)),
        *attempt("b", 3, 8),
    ]

    assert check(journal, {"a": "k", "b": "k"}) == (0, 2)
    assert check(journal, {"a": "k", "b": "k"}, limit=1) == (1, 2)


def test_an_attempt_without_an_end_counts_until_its_job_finished() -> None:
    journal = [JournalEntry("a", "claimed", 1, at(0)), *attempt("b", 1, 2), *attempt("c", 1, 2)]

    attempts = attempts_from_journal(journal, {"a": "k", "b": "k", "c": "k"}, {"a": at(4)})

    [open_attempt] = [a for a in attempts if not a.ended]
    assert open_attempt.job_id == "a" and open_attempt.end == at(4)
    assert len(limit_excesses(attempts, 2)[0]) == 1
