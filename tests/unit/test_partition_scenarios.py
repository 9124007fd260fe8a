"""Who is cut from whom in each of Jepsen's partition scenarios (chaos/partitions.py), what a
partition schedule holds, and what a partition's cost is computed from."""

from __future__ import annotations

import itertools
import random
from collections import Counter

import pytest

from chaos import faults, partitions
from chaos.partitions import (
    HALVES,
    MAJORITIES_RING,
    RANDOM_HALVES,
    RANDOM_NODE,
    Window,
    costs,
    cut_pairs,
    grudges,
)

NODES = (1, 2, 3)


def components(found: partitions.Grudges) -> set[frozenset[int]]:
    """The groups of nodes that hear each other (for a symmetric cut)."""
    return {frozenset(set(NODES) - found[node]) for node in NODES}


def test_halves_cuts_node_one_from_the_other_two_both_ways() -> None:
    found = grudges(HALVES, 3, random.Random(0))
    assert found == {1: {2, 3}, 2: {1}, 3: {1}}
    assert cut_pairs(found) == {(1, 2), (1, 3), (2, 1), (3, 1)}


@pytest.mark.parametrize("seed", range(20))
def test_random_halves_splits_one_node_from_two_symmetrically(seed: int) -> None:
    found = grudges(RANDOM_HALVES, 3, random.Random(seed))
    pairs = cut_pairs(found)
    assert all((b, a) in pairs for a, b in pairs)
    assert sorted(len(group) for group in components(found)) == [1, 2]


def test_random_halves_and_random_node_depend_on_the_seed_only() -> None:
    for scenario in (RANDOM_HALVES, RANDOM_NODE):
        drawn = [grudges(scenario, 3, random.Random(seed)) for seed in range(30)]
        assert drawn == [grudges(scenario, 3, random.Random(seed)) for seed in range(30)]
        alone = Counter(
            next(n for n in NODES if len(found[n]) == 2) for found in drawn
        )  # the node cut off from both others
        assert set(alone) == set(NODES)  # every node is drawn at some seed


@pytest.mark.parametrize("seed", range(20))
def test_majorities_ring_gives_each_node_a_majority_none_the_same(seed: int) -> None:
    found = grudges(MAJORITIES_RING, 3, random.Random(seed))
    heard = [frozenset(set(NODES) - found[node]) for node in NODES]
    assert all(len(view) == 2 and node in view for node, view in zip(NODES, heard, strict=True))
    assert len(set(heard)) == 3
    # Each node drops one other, and every link is cut in one direction only.
    assert all(len(found[node]) == 1 for node in NODES)
    pairs = cut_pairs(found)
    assert len(pairs) == 3 and not any((b, a) in pairs for a, b in pairs)


def test_majorities_ring_of_five_nodes_hears_three_centred_on_itself() -> None:
    found = partitions.majorities_ring([1, 2, 3, 4, 5])
    assert found[1] == {3, 4}
    assert found[3] == {5, 1}
    assert all(len(senders) == 2 for senders in found.values())


@pytest.mark.parametrize("seed", range(20))
def test_random_node_cuts_one_node_from_all_others(seed: int) -> None:
    found = grudges(RANDOM_NODE, 3, random.Random(seed))
    alone = [node for node in NODES if found[node] == set(NODES) - {node}]
    assert len(alone) == 1
    assert all(found[node] == {alone[0]} for node in NODES if node != alone[0])


def test_an_unknown_scenario_is_refused_by_name() -> None:
    with pytest.raises(ValueError, match="partition_everything"):
        grudges("partition_everything", 3, random.Random(0))


def test_sixteen_partitions_hold_every_scenario_at_10_and_30_seconds_twice() -> None:
    planned = faults.partition_schedule(random.Random(7), 16, 720.0)
    kinds = Counter((p.fault.value, p.seconds) for p in planned)
    assert kinds == {(s, d): 2 for s in partitions.SCENARIOS for d in partitions.DURATIONS}
    times = [p.at for p in planned]
    assert times == sorted(times) and times[-1] < 720.0
    # One at a time: each has at least its length and a margin before the next one.
    assert all(b - a >= 30.0 + 10.0 for a, b in itertools.pairwise(times))


def test_no_partitions_leave_the_seed_s_other_draws_alone() -> None:
    rng = random.Random(3)
    assert faults.partition_schedule(rng, 0, 100.0) == []
    assert rng.random() == random.Random(3).random()


def window(scenario: str, began: float, whole: float) -> Window:
    return Window(scenario, 10.0, {}, began, began + 10.0, whole, ())


def test_cost_compares_jobs_accepted_during_a_partition_with_those_outside() -> None:
    # Jobs accepted at 0 and 1 finish fast; at 105 and 106 (during the partition) they wait.
    finished = [(0.0, 0.5), (1.0, 1.2), (105.0, 121.0), (106.0, 122.0), (200.0, 200.3)]
    cost = costs([window(HALVES, 100.0, 118.0)], finished)[(HALVES, 10.0)]
    assert cost.during.count == 2 and cost.during.high == 16.0
    assert cost.outside.count == 3 and cost.outside.high == pytest.approx(0.5)
    # Nothing finished from 1.2 until 121.0: the whole stretch overlaps the partition.
    assert cost.longest_gap == pytest.approx(119.8)
    assert cost.whole_after == pytest.approx(8.0)
