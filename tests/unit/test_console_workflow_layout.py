"""The workflow graph's layout (console/workflows.py), pure: each job's depth, its box's column
and row, and the edges' ends on the boxes' sides."""

from __future__ import annotations

import uuid

from jobrelay.console import workflows
from jobrelay.console.workflows import BOX_HEIGHT, BOX_WIDTH, COLUMN_GAP, MARGIN, depths, layout
from jobrelay.core.states import JobState
from jobrelay.core.workflows import WorkflowJob


def job(ref: str, *after: str, progress: dict[str, object] | None = None) -> WorkflowJob:
    return WorkflowJob(ref, uuid.uuid4(), "demo.sleep", JobState.WAITING, after, None, progress)


def test_a_jobs_depth_is_one_more_than_its_deepest_parents() -> None:
    # a → b → d, a → d, c alone; e waits for d and c.
    graph = {"a": (), "b": ("a",), "c": (), "d": ("b", "a"), "e": ("d", "c")}
    assert depths(graph) == {"a": 0, "b": 1, "c": 0, "d": 2, "e": 3}


def test_a_parent_given_after_its_child_still_comes_first() -> None:
    assert depths({"child": ("parent",), "parent": ()}) == {"child": 1, "parent": 0}


def test_every_job_without_parents_is_in_the_first_column() -> None:
    assert depths({ref: () for ref in "xyz"}) == {"x": 0, "y": 0, "z": 0}


def test_boxes_stand_in_columns_by_depth_in_the_order_submitted() -> None:
    graph = layout([job("a"), job("b", "a"), job("c", "a"), job("d", "b", "c")])
    place = {box.job.ref: (box.x, box.y) for box in graph.boxes}
    column = BOX_WIDTH + COLUMN_GAP
    row = BOX_HEIGHT + workflows.ROW_GAP
    assert place == {
        "a": (MARGIN, MARGIN),
        "b": (MARGIN + column, MARGIN),
        "c": (MARGIN + column, MARGIN + row),
        "d": (MARGIN + 2 * column, MARGIN),
    }
    assert graph.width == 2 * MARGIN + 3 * BOX_WIDTH + 2 * COLUMN_GAP
    assert graph.height == 2 * MARGIN + 2 * BOX_HEIGHT + workflows.ROW_GAP


def test_an_edge_runs_from_its_parents_right_side_to_its_childs_left_side() -> None:
    graph = layout([job("a"), job("b", "a"), job("c", "a"), job("d", "b", "c")])
    boxes = {box.job.ref: box for box in graph.boxes}
    assert [(edge.parent, edge.child) for edge in graph.edges] == [
        ("a", "b"),
        ("a", "c"),
        ("b", "d"),
        ("c", "d"),
    ]
    a_to_c = graph.edges[1]
    assert (a_to_c.x1, a_to_c.y1) == (boxes["a"].x + BOX_WIDTH, boxes["a"].y + BOX_HEIGHT / 2)
    assert (a_to_c.x2, a_to_c.y2) == (boxes["c"].x, boxes["c"].y + BOX_HEIGHT / 2)


def test_a_box_shows_its_progress_and_shortens_a_long_ref() -> None:
    long_ref = "r" * 100
    graph = layout([job(long_ref, progress={"fraction": 0.5, "message": "half", "at": None})])
    (box,) = graph.boxes
    assert box.progress is not None and box.progress.percent == "50%"
    assert box.bar_width == (BOX_WIDTH - 2 * workflows.BAR_INSET) / 2
    assert len(box.ref_label) == workflows.LABEL_CHARS and box.ref_label.endswith("…")
    assert box.href == f"/ui/jobs/{box.job.id}"


def test_a_fraction_out_of_range_is_clamped_and_no_progress_is_no_bar() -> None:
    over, none = layout([job("a", progress={"fraction": 7}), job("b")]).boxes
    assert over.progress is not None and over.progress.fraction == 1.0
    assert none.progress is None and none.bar_width == 0
