"""The waiting queue: FCFS (deque) and priority (heap) give sequences back in exactly the order a sorted list of
their ``order_key`` gives — under random arrivals, admissions, preemptions (a popped sequence pushed back) and
aborts."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from accelkit.serve.sampling import SamplingParams
from accelkit.serve.sequence import Sequence
from accelkit.serve.waiting_queue import FCFSQueue, PriorityQueue, make_waiting_queue


def seq(rid, priority=0, *, policy="fcfs"):
    s = Sequence(rid, [1, 2, 3], SamplingParams.greedy(4), priority=priority)
    s.order_key = (priority if policy == "priority" else 0, s.arrival_order)  # as Scheduler.add sets it
    return s


def test_the_policy_picks_the_queue():
    assert type(make_waiting_queue("fcfs")) is FCFSQueue
    assert type(make_waiting_queue("priority")) is PriorityQueue


@pytest.mark.parametrize("policy", ["fcfs", "priority"])
def test_a_preempted_sequence_goes_back_before_later_arrivals(policy):
    q = make_waiting_queue(policy)
    a, b, c = seq("a", policy=policy), seq("b", policy=policy), seq("c", policy=policy)
    for s in (a, b, c):
        q.push(s)
    assert q.pop() is a and q.pop() is b
    q.push(b)  # preempted: ahead of c, which arrived later
    q.push(a)  # preempted after it, but older still
    assert [s.request_id for s in q] == ["a", "b", "c"]
    assert q.peek() is a and len(q) == 3


def test_fcfs_orders_a_request_queued_after_a_later_one_by_its_arrival():
    q = FCFSQueue()
    first, second, third = seq("first"), seq("second"), seq("third")  # made (arrived) in this order
    q.push(third)  # … but queued in another (several threads)
    q.push(first)
    q.push(second)
    assert [s.request_id for s in q] == ["first", "second", "third"]


def test_priority_orders_by_priority_then_arrival():
    q = PriorityQueue()
    for rid, p in (("low", 2), ("high", -1), ("mid", 0), ("high2", -1)):
        q.push(seq(rid, p, policy="priority"))
    assert [q.pop().request_id for _ in range(4)] == ["high", "high2", "mid", "low"]
    with pytest.raises(IndexError):
        q.peek()


@pytest.mark.parametrize("policy", ["fcfs", "priority"])
def test_removing_what_is_not_queued_is_an_error(policy):
    q = make_waiting_queue(policy)
    q.push(seq("a", policy=policy))
    with pytest.raises(ValueError):
        q.remove(seq("b", policy=policy))


@settings(max_examples=150, deadline=None)
@given(policy=st.sampled_from(["fcfs", "priority"]),
       ops=st.lists(st.tuples(st.sampled_from(["new", "pop", "preempt", "remove"]), st.integers(-2, 2),
                              st.integers(0, 50)), max_size=60))
def test_every_queue_keeps_the_sorted_order(policy, ops):
    q = make_waiting_queue(policy)
    reference: list[Sequence] = []
    popped: list[Sequence] = []  # admitted: may be preempted (pushed back) later
    for n, (op, priority, pick) in enumerate(ops):
        if op == "new":
            s = seq(f"r{n}", priority, policy=policy)
            q.push(s)
            reference.append(s)
        elif op == "pop" and reference:
            reference.sort(key=lambda s: s.order_key)
            expected = reference.pop(0)
            assert q.peek() is expected
            assert q.pop() is expected
            popped.append(expected)
        elif op == "preempt" and popped:
            s = popped.pop(pick % len(popped))
            q.push(s)
            reference.append(s)
        elif op == "remove" and reference:
            s = reference.pop(pick % len(reference))
            q.remove(s)
        assert [s.request_id for s in q] == [s.request_id for s in sorted(reference, key=lambda s: s.order_key)]
        assert len(q) == len(reference) and bool(q) == bool(reference)
