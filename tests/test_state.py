"""SPEC §3, working state: a pure, deterministic, monotonic reduction."""

from __future__ import annotations

from agentlog.processors.thread import ThreadProcessor
from tests.helpers import call, ev, result


def reduce_all(*events) -> dict:
    tp = ThreadProcessor.new("t1")
    for e in events:
        tp.apply(e)
    return tp.state.public()


def test_goal_sets_the_threads_effective_goal() -> None:
    s = reduce_all(ev("e1", "goal", {"text": "a"}), ev("e2", "goal", {"text": "b"}, 1))
    assert s["goal"] == {"text": "b", "event_id": "e2"}


def test_constraints_are_added_and_removed_only_explicitly() -> None:
    s = reduce_all(ev("e1", "constraint", {"constraint_id": "c1", "text": "read-only"}),
                   ev("e2", "constraint", {"constraint_id": "c2", "text": "no deploys"}, 1),
                   ev("e3", "constraint", {"constraint_id": "c1", "op": "remove"}, 2))  # fmt: skip
    assert [c["constraint_id"] for c in s["constraints"]] == ["c2"]


def test_a_step_never_moves_back_a_stale_running_after_done_is_ignored() -> None:
    s = reduce_all(ev("e1", "plan", {"steps": [{"step_id": "s1", "text": "a", "status": "done"}]}),
                   ev("e2", "plan", {"steps": [{"step_id": "s1", "status": "running"}]}, 1))  # fmt: skip
    assert s["plan"][0]["status"] == "done"


def test_a_task_never_moves_back_and_the_first_terminal_status_stays() -> None:
    s = reduce_all(ev("e1", "task", {"task_id": "t", "status": "running"}),
                   ev("e2", "task", {"task_id": "t", "status": "failed"}, 1),
                   ev("e3", "task", {"task_id": "t", "status": "done"}, 2),
                   ev("e4", "task", {"task_id": "t", "status": "pending"}, 3))  # fmt: skip
    assert s["tasks"][0]["status"] == "failed"


def test_a_confirmed_file_change_never_disappears_because_a_summary_forgot_it() -> None:
    s = reduce_all(ev("e1", "file_change", {"path": "a.py", "change": "modified"}),
                   ev("e2", "compaction", {"summary": {"modified_files": []}, "covers_through": "e1"}, 1),
                   ev("e3", "file_change", {"path": "a.py", "change": "deleted", "confirmed": False}, 2))  # fmt: skip
    assert s["files"] == [{"path": "a.py", "change": "modified", "confirmed": True, "event_id": "e1",
                           "ts": s["files"][0]["ts"]}]  # fmt: skip


def test_a_pending_approval_leaves_the_queue_only_on_an_explicit_decision() -> None:
    events = [ev("e1", "approval_request", {"approval_id": "a1", "action": "deploy"}),
              ev("e2", "turn_end", {}, 1), ev("e3", "window_switch", {"new_window_id": "w9"}, 2),
              ev("e4", "compaction", {"summary": {}, "covers_through": "e3"}, 3)]  # fmt: skip
    assert [a["approval_id"] for a in reduce_all(*events)["pending_approvals"]] == ["a1"]
    decided = reduce_all(*events, ev("e5", "approval_decision", {"approval_id": "a1", "decision": "denied"}, 4))
    assert decided["pending_approvals"] == []
    assert decided["decided_approvals"][0]["decision"] == "denied"


def test_a_decision_that_arrives_before_its_request_keeps_it_out_of_the_queue() -> None:
    s = reduce_all(ev("e1", "approval_decision", {"approval_id": "a1", "decision": "approved"}),
                   ev("e2", "approval_request", {"approval_id": "a1", "action": "deploy"}, 1))  # fmt: skip
    assert s["pending_approvals"] == []


def test_a_sub_agent_names_its_own_thread_and_what_it_reported_when_it_finished() -> None:
    s = reduce_all(ev("e1", "agent_spawn", {"child_agent_id": "sub", "role": "search", "child_thread_id": "t1.sub"}),
                   ev("e2", "agent_exit", {"child_agent_id": "sub", "status": "ok", "summary": "found 3 callers"}, 1))  # fmt: skip
    (agent,) = s["agents"]
    assert (agent["thread_id"], agent["status"], agent["exit_status"], agent["summary"]) == (
        "t1.sub", "finished", "ok", "found 3 callers")


def test_agents_are_tracked_active_then_finished() -> None:
    s = reduce_all(ev("e1", "agent_spawn", {"child_agent_id": "sub", "role": "search"}),
                   ev("e2", "agent_exit", {"child_agent_id": "sub", "status": "ok"}, 1),
                   ev("e3", "agent_spawn", {"child_agent_id": "sub"}, 2))  # fmt: skip
    assert s["agents"][0]["status"] == "finished"


def test_the_goal_and_constraints_are_pinned_through_compaction_and_window_switch() -> None:
    s = reduce_all(ev("e1", "goal", {"text": "g"}), ev("e2", "constraint", {"constraint_id": "c", "text": "x"}, 1),
                   ev("e3", "compaction", {"summary": {"goal": "other"}, "covers_through": "e2"}, 2),
                   ev("e4", "window_switch", {"new_window_id": "w2"}, 3))  # fmt: skip
    assert s["goal"]["text"] == "g" and s["constraints"][0]["text"] == "x"
    assert s["window_id"] == "w2" and s["summary_covers_through"] == "e2"


def test_pending_calls_failures_last_event_and_count_are_kept() -> None:
    s = reduce_all(call("e1", "c1", 0), call("e2", "c2", 1), ev("e3", "error", {"message": "boom", "code": 7}, 2))
    assert [c["call_id"] for c in s["pending_calls"]] == ["c1", "c2"]
    assert s["failures"][0]["message"] == "boom" and s["failures"][0]["status"] == "7"
    assert (s["last_event_id"], s["event_count"]) == ("e3", 3)


def test_a_late_real_result_takes_the_synthetic_missing_out_of_the_failures() -> None:
    s = reduce_all(call("e1", "c1", 0, turn_id="u1"), ev("e2", "turn_end", {}, 1, turn_id="u1"),
                   result("e3", "c1", 2, output="ok, 3 passed"))  # fmt: skip
    assert s["failures"] == []


def test_a_failed_tool_result_is_listed_with_the_head_of_its_output() -> None:
    s = reduce_all(call("e1", "c1", 0), result("e2", "c1", 1, output="E42 " + "x" * 500, status="error"))
    (failure,) = s["failures"]
    assert failure["status"] == "error" and failure["event_id"] == "e2"
    assert failure["message"].startswith("E42 x") and len(failure["message"]) == 200
