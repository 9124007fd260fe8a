"""The console's signed values and its drawings, without a server: sessions, CSRF tokens,
flash messages, the "next" target of a sign-in, the chart and the timeline."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta

import pytest

from jobrelay.cli.common import CliError, settings_from_env
from jobrelay.console.charts import minute_chart, nice_ceiling, timeline
from jobrelay.console.security import (
    DEFAULT_NEXT,
    Flash,
    Session,
    csrf_matches,
    csrf_token,
    read_flash,
    read_session,
    safe_next,
    sign_flash,
    sign_session,
)
from jobrelay.core.jobs import JournalEntry
from jobrelay.core.masking import Masker
from jobrelay.core.settings import Settings
from jobrelay.core.stats import FinishedMinute

KEY = b"k" * 32
OTHER_KEY = b"o" * 32
NOW = 1_800_000_000.0


def a_session(**changes: object) -> Session:
    values: dict[str, object] = {
        "client_id": uuid.UUID("01936f3e-0000-7000-8000-000000000001"),
        "expires_at": int(NOW) + 3600,
        "nonce": "n0nce-value",
    }
    return Session(**(values | changes))  # type: ignore[arg-type]


# --- sessions -------------------------------------------------------------------------------


def test_a_signed_session_reads_back_as_itself() -> None:
    session = Session.new(uuid.uuid4(), now=NOW, lifetime_seconds=600)
    assert read_session(KEY, sign_session(KEY, session), now=NOW) == session
    assert session.expires_at == int(NOW) + 600


def test_two_new_sessions_of_one_client_have_different_nonces() -> None:
    client = uuid.uuid4()
    first = Session.new(client, now=NOW, lifetime_seconds=600)
    second = Session.new(client, now=NOW, lifetime_seconds=600)
    assert first.nonce != second.nonce


def test_a_session_is_refused_once_it_expired() -> None:
    signed = sign_session(KEY, a_session(expires_at=int(NOW) + 10))
    assert read_session(KEY, signed, now=NOW + 9) is not None
    assert read_session(KEY, signed, now=NOW + 10) is None


@pytest.mark.parametrize(
    "tamper",
    [
        # Another client id, a later expiry, another nonce: the signature no longer matches.
        lambda v: v.replace("0001.", "0002.", 1),
        lambda v: v.replace(str(int(NOW) + 3600), str(int(NOW) + 999_999), 1),
        lambda v: v.replace("n0nce-value", "other-nonce", 1),
        lambda v: v[:-2] + ("AA" if not v.endswith("AA") else "BB"),
        lambda v: v.rpartition(".")[0],  # no signature
        lambda v: v + "." + "x" * 5000,  # far too long
        lambda v: "",
    ],
    ids=["client", "expiry", "nonce", "signature", "unsigned", "oversized", "empty"],
)
def test_an_altered_session_cookie_is_refused(tamper: object) -> None:
    signed = sign_session(KEY, a_session())
    assert callable(tamper)
    assert read_session(KEY, tamper(signed), now=NOW) is None


def test_a_session_signed_with_another_key_is_refused() -> None:
    assert read_session(KEY, sign_session(OTHER_KEY, a_session()), now=NOW) is None


def test_a_flash_cookie_is_never_a_session() -> None:
    flash = sign_flash(KEY, Flash("ok", "s1.x.9999999999.nonce"), now=NOW)
    assert read_session(KEY, flash, now=NOW) is None


def test_the_session_cookie_never_holds_a_token() -> None:
    signed = sign_session(KEY, a_session())
    assert "jr_" not in signed
    assert signed.count(".") == 4  # version, client, expiry, nonce, signature


# --- CSRF -------------------------------------------------------------------------------------


def test_a_sessions_csrf_token_matches_only_that_session() -> None:
    session = a_session()
    token = csrf_token(KEY, session)
    assert csrf_matches(KEY, session, token)
    assert not csrf_matches(KEY, a_session(nonce="another"), token)
    assert not csrf_matches(OTHER_KEY, session, token)


@pytest.mark.parametrize("sent", [None, "", "x", "é" * 43])
def test_a_missing_or_wrong_csrf_token_does_not_match(sent: str | None) -> None:
    assert not csrf_matches(KEY, a_session(), sent)


def test_the_csrf_token_is_not_the_session_signature() -> None:
    session = a_session()
    assert csrf_token(KEY, session) != sign_session(KEY, session).rpartition(".")[2]


# --- flash messages ---------------------------------------------------------------------------


def test_a_flash_reads_back_once_signed_and_not_after_a_minute() -> None:
    signed = sign_flash(KEY, Flash("error", "Not replayed: <b>job</b> is gone, café"), now=NOW)
    assert read_flash(KEY, signed, now=NOW + 1) == Flash(
        "error", "Not replayed: <b>job</b> is gone, café"
    )
    assert read_flash(KEY, signed, now=NOW + 61) is None
    assert read_flash(OTHER_KEY, signed, now=NOW) is None
    assert read_flash(KEY, signed.replace("error", "ok", 1), now=NOW) is None


# --- where a sign-in goes next ----------------------------------------------------------------


@pytest.mark.parametrize(
    "target",
    ["/ui/", "/ui", "/ui/jobs?state=queued&client=alice", "/ui/jobs/0193-aa", "/ui/quarantine"],
)
def test_a_console_path_is_a_next_target(target: str) -> None:
    assert safe_next(target) == target


@pytest.mark.parametrize(
    "target",
    [
        None,
        "",
        "https://evil.example/ui/",
        "//evil.example/ui/",
        "/\\evil.example",
        "/ui\\@evil.example",
        "javascript:alert(1)",
        "/v1/admin/stats",
        "/uix/jobs",
        "/ui/../v1/jobs",
        "/ui/%2e%2e/v1/jobs",
        "/ui//evil.example",
        "/ui/jobs\r\nSet-Cookie: x=1",
        "/ui/jobs#fragment",
        "/ui/" + "a" * 3000,
    ],
)
def test_anything_else_goes_to_the_overview(target: str | None) -> None:
    assert safe_next(target) == DEFAULT_NEXT


# --- the secret -------------------------------------------------------------------------------


def test_the_console_secret_is_masked_in_logs() -> None:
    secret = "console-secret-" + "s" * 24
    masker = Masker.from_settings(Settings(console_secret=secret))
    assert masker(f"key is {secret}!") == "key is ***!"


def test_a_short_console_secret_is_refused_without_echoing_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("JOBRELAY_CONSOLE_SECRET", "too-short-secret")
    with pytest.raises(CliError) as refused:
        settings_from_env()
    assert "JOBRELAY_CONSOLE_SECRET" in str(refused.value)
    assert "too-short-secret" not in str(refused.value)


# --- the drawings -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "top"), [(0, 1), (1, 1), (2, 2), (3, 5), (7, 10), (10, 10), (11, 20), (140, 200)]
)
def test_the_charts_top_is_a_round_number_at_least_the_highest_bar(value: int, top: int) -> None:
    assert nice_ceiling(value) == top


def test_the_chart_stacks_quarantined_on_succeeded_in_proportion() -> None:
    start = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)
    minutes = [FinishedMinute(start + timedelta(minutes=n), 0, 0) for n in range(60)]
    minutes[10] = FinishedMinute(minutes[10].minute, 8, 2)
    minutes[11] = FinishedMinute(minutes[11].minute, 4, 0)
    chart = minute_chart(minutes)

    assert (chart.succeeded, chart.quarantined) == (12, 2)
    assert len(chart.bars) == 60
    full, half = chart.bars[10], chart.bars[11]
    assert full.succeeded_height + full.quarantined_height == pytest.approx(chart.plot_height)
    assert half.succeeded_height == pytest.approx(chart.plot_height * 4 / 10, abs=0.1)
    assert full.quarantined_y + full.quarantined_height == pytest.approx(full.succeeded_y)
    assert chart.bars[0].succeeded_height == 0
    assert full.title == "12:10 UTC: 8 succeeded, 2 quarantined"
    assert [tick.label for tick in chart.x_ticks] == [f"12:{m:02}" for m in range(0, 60, 10)]
    assert [tick.label for tick in chart.y_ticks] == ["0", "5", "10"]


def test_the_timeline_places_each_entry_by_its_time_since_the_first() -> None:
    start = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)
    events = [
        JournalEntry(start, "received", 0, None),
        JournalEntry(start + timedelta(seconds=1), "claimed", 1, None),
        JournalEntry(start + timedelta(seconds=4), "succeeded", 1, None),
    ]
    drawn = timeline(events)
    assert [mark.kind for mark in drawn.marks] == ["intent", "attempt", "success"]
    assert drawn.marks[0].x == drawn.start and drawn.marks[-1].x == drawn.end
    assert drawn.marks[1].x == pytest.approx(drawn.start + (drawn.end - drawn.start) / 4, abs=0.1)
    assert [mark.offset for mark in drawn.marks] == ["+0.000 s", "+1.0 s", "+4.0 s"]
    assert drawn.span == "4.0 s"
    assert timeline([]).marks == []
