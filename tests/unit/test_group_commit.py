"""Group commit (``db/group_commit.py``) with a stand-in statement: who shares a group, and
what each caller hears when the group, or its neighbour, fails."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import pytest

from jobrelay.db.group_commit import GroupCommit


class Statement:
    """Answers each request with its double; records the groups; can be held or made to fail."""

    def __init__(self) -> None:
        self.groups: list[list[int]] = []
        self.release = asyncio.Event()
        self.release.set()
        self.fails_with: int | None = None  # a group holding this request fails

    async def __call__(self, requests: Sequence[int]) -> list[int]:
        self.groups.append(list(requests))
        await self.release.wait()
        if self.fails_with in requests:
            raise ConnectionError("database away")
        return [2 * request for request in requests]


async def test_a_lone_request_runs_at_once_alone() -> None:
    statement = Statement()
    group = GroupCommit(statement)
    assert await group.submit(3) == 6
    assert statement.groups == [[3]]


async def test_requests_of_the_same_turn_share_one_statement() -> None:
    statement = Statement()
    group = GroupCommit(statement)
    answers = await asyncio.gather(*(group.submit(n) for n in range(10)))
    assert answers == [2 * n for n in range(10)]
    assert statement.groups == [list(range(10))]


async def test_requests_made_while_groups_run_wait_and_form_the_next_group() -> None:
    statement = Statement()
    statement.release.clear()
    group = GroupCommit(statement, max_running=1)
    first = asyncio.create_task(group.submit(1))
    await asyncio.sleep(0.01)
    later = [asyncio.create_task(group.submit(n)) for n in (2, 3, 4)]
    await asyncio.sleep(0.01)
    assert statement.groups == [[1]]  # the others wait: one group runs at a time
    statement.release.set()
    assert await first == 2
    assert [await task for task in later] == [4, 6, 8]
    assert statement.groups == [[1], [2, 3, 4]]


async def test_a_group_never_exceeds_its_size() -> None:
    statement = Statement()
    group = GroupCommit(statement, max_size=4, max_running=8)
    await asyncio.gather(*(group.submit(n) for n in range(10)))
    assert [len(g) for g in statement.groups] == [4, 4, 2]
    assert sorted(n for g in statement.groups for n in g) == list(range(10))


async def test_a_failed_statement_fails_every_request_of_its_group_and_no_other() -> None:
    statement = Statement()
    statement.release.clear()
    group = GroupCommit(statement, max_running=1)
    doomed = [asyncio.create_task(group.submit(n)) for n in (1, 2)]
    await asyncio.sleep(0.01)
    spared = asyncio.create_task(group.submit(3))  # waits for the next group
    await asyncio.sleep(0.01)
    statement.fails_with = 1
    statement.release.set()
    for task in doomed:
        with pytest.raises(ConnectionError):
            await task
    assert await spared == 6
    assert statement.groups == [[1, 2], [3]]


async def test_a_cancelled_caller_leaves_its_group_running_for_the_others() -> None:
    statement = Statement()
    statement.release.clear()
    group = GroupCommit(statement)
    gone = asyncio.create_task(group.submit(1))
    stays = asyncio.create_task(group.submit(2))
    await asyncio.sleep(0.01)
    gone.cancel()
    statement.release.set()
    assert await stays == 4
    with pytest.raises(asyncio.CancelledError):
        await gone
    await group.close()
    assert statement.groups == [[1, 2]]


def test_a_group_holds_at_least_one_request() -> None:
    with pytest.raises(ValueError):
        GroupCommit(Statement(), max_size=0)


async def test_a_caller_cancelled_before_its_group_starts_is_not_run_for() -> None:
    statement = Statement()
    statement.release.clear()
    group = GroupCommit(statement, max_running=1)
    first = asyncio.create_task(group.submit(1))
    await asyncio.sleep(0.01)
    gone = asyncio.create_task(group.submit(2))
    stays = asyncio.create_task(group.submit(3))
    await asyncio.sleep(0.01)
    gone.cancel()
    statement.release.set()
    assert (await first, await stays) == (2, 6)
    assert statement.groups == [[1], [3]]
