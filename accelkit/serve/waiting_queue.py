"""The scheduler's waiting queue, in scheduling order: ``Sequence.order_key`` (priority, arrival), smallest first.

Two shapes behind one interface, chosen by ``SchedulerConfig.policy`` (``make_waiting_queue``):

- ``fcfs`` — a deque. Every key's priority is 0, so the order is arrival: a new request is the newest
  (appended) and a preempted one is older than everything still waiting (put back at the front); both O(1).
  The rare push that is neither (a request made on one thread and queued after a later one from another
  thread) is inserted where its arrival puts it, so the order is exactly the keys' order.
- ``priority`` — a binary heap: push and pop O(log n) whatever the mix of priorities.

Removal (a request aborted while it waits) is O(n) in both. Pure Python: no torch.
"""

from __future__ import annotations

import heapq
from abc import ABC, abstractmethod
from collections import deque
from collections.abc import Iterator
from typing import Literal

from accelkit.serve.sequence import Sequence


class WaitingQueue(ABC):
    """Sequences waiting to be admitted; ``peek``/``pop`` give the one with the smallest ``order_key``."""

    @abstractmethod
    def push(self, seq: Sequence) -> None:
        """Queue ``seq`` (a new request, or one preempted) at the place its ``order_key`` gives it."""

    @abstractmethod
    def peek(self) -> Sequence:
        """The next sequence to admit (IndexError when empty)."""

    @abstractmethod
    def pop(self) -> Sequence:
        """Remove and return the next sequence to admit (IndexError when empty)."""

    @abstractmethod
    def remove(self, seq: Sequence) -> None:
        """Take ``seq`` out wherever it is (ValueError when it is not queued)."""

    @abstractmethod
    def __len__(self) -> int: ...

    @abstractmethod
    def __iter__(self) -> Iterator[Sequence]:
        """Every queued sequence, in admission order (for stats and tests: the heap sorts a copy)."""

    def __bool__(self) -> bool:
        return len(self) > 0


class FCFSQueue(WaitingQueue):
    def __init__(self) -> None:
        self._queue: deque[Sequence] = deque()

    def push(self, seq: Sequence) -> None:
        queue, key = self._queue, seq.order_key
        if not queue or queue[-1].order_key < key:
            queue.append(seq)  # a new request
        elif key < queue[0].order_key:
            queue.appendleft(seq)  # preempted: it arrived before everything that waits
        else:  # arrived between two waiting sequences (queued late from another thread, or a second preemption)
            queue.insert(next(i for i, s in enumerate(queue) if key < s.order_key), seq)

    def peek(self) -> Sequence:
        return self._queue[0]

    def pop(self) -> Sequence:
        return self._queue.popleft()

    def remove(self, seq: Sequence) -> None:
        self._queue.remove(seq)

    def __len__(self) -> int:
        return len(self._queue)

    def __iter__(self) -> Iterator[Sequence]:
        return iter(self._queue)


class PriorityQueue(WaitingQueue):
    def __init__(self) -> None:
        # (order_key, seq): keys are unique (the arrival order breaks ties), so a Sequence is never compared
        self._heap: list[tuple[tuple[int, int], Sequence]] = []

    def push(self, seq: Sequence) -> None:
        heapq.heappush(self._heap, (seq.order_key, seq))

    def peek(self) -> Sequence:
        return self._heap[0][1]

    def pop(self) -> Sequence:
        return heapq.heappop(self._heap)[1]

    def remove(self, seq: Sequence) -> None:
        heap = self._heap
        i = next((i for i, (_, s) in enumerate(heap) if s is seq), None)
        if i is None:
            raise ValueError(f"{seq!r} is not in the waiting queue")
        heap[i] = heap[-1]
        heap.pop()
        heapq.heapify(heap)

    def __len__(self) -> int:
        return len(self._heap)

    def __iter__(self) -> Iterator[Sequence]:
        return (seq for _, seq in sorted(self._heap))


def make_waiting_queue(policy: Literal["fcfs", "priority"]) -> WaitingQueue:
    """The queue for ``SchedulerConfig.policy``."""
    return PriorityQueue() if policy == "priority" else FCFSQueue()
