"""The token mask of a structured-output state, computed over the whole vocabulary at once with numpy.

A mask asks, for every token, whether the guide's byte-level automaton survives the token's bytes from a state.
Walking the vocabulary's byte trie depth-first in Python costs ~0.7 µs a node: ~55 ms for a state where most
tokens are allowed (inside a JSON string) at a 32K vocabulary, ~4× that at Llama 3's 128K — time the engine
thread spends while every running request waits. Here the trie is laid out level by level (every node of depth
d with its parent and its byte, in arrays), and one pass per level moves the states of all the live nodes of the
level at once through a transition table ``(state, byte) → state``. The table is filled lazily: a pair not seen
yet is asked of the automaton in Python once, then stays — the distinct pairs a walk meets are few (inside a
string the state hardly changes) next to the nodes it visits. A walk is then a few numpy gathers per level.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

UNKNOWN = -2  # a table entry not computed yet
DEAD = -1  # the automaton dies on that byte


class LevelTrie:
    """The byte trie of a vocabulary (``children[n]``: byte → child node, ``token_ids[n]``: tokens ending at n;
    node 0 the root) as arrays per depth: ``levels[d] = (nodes, parents, bytes)`` of the nodes at depth d + 1, and
    ``token_node[t]`` the node where token t's bytes end (−1: a token with no bytes, never allowed)."""

    def __init__(self, children: Sequence[dict[int, int]], token_ids: Sequence[Sequence[int]], vocab_size: int) -> None:
        self.num_nodes = len(children)
        self.levels: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []
        frontier = [0]
        while frontier:
            nodes: list[int] = []
            parents: list[int] = []
            bytes_: list[int] = []
            for parent in frontier:
                for byte, child in children[parent].items():
                    nodes.append(child)
                    parents.append(parent)
                    bytes_.append(byte)
            if nodes:
                self.levels.append((np.asarray(nodes, dtype=np.int64), np.asarray(parents, dtype=np.int64),
                                    np.asarray(bytes_, dtype=np.int64)))
            frontier = nodes
        self.token_node = np.full(vocab_size, -1, dtype=np.int64)
        for node, ids in enumerate(token_ids):
            for token in ids:
                if token < vocab_size:
                    self.token_node[token] = node


class TransitionTable:
    """``table[state, byte]``: the next state id, :data:`DEAD`, or :data:`UNKNOWN`; rows grow with the states."""

    def __init__(self) -> None:
        self.table = np.full((64, 256), UNKNOWN, dtype=np.int32)

    def ensure(self, num_states: int) -> None:
        rows = self.table.shape[0]
        if num_states > rows:
            grown = np.full((max(num_states, 2 * rows), 256), UNKNOWN, dtype=np.int32)
            grown[:rows] = self.table
            self.table = grown


def allowed_tokens(trie: LevelTrie, table: TransitionTable, start: int,
                   transition: Callable[[int, int], int]) -> np.ndarray:
    """``(vocab,)`` bool: the tokens whose every byte the automaton takes from state id ``start`` (a row of
    ``table``). ``transition(state, byte)`` fills in a pair the table does not know yet (it may add rows)."""
    state = np.full(trie.num_nodes, DEAD, dtype=np.int32)
    state[0] = start
    for nodes, parents, bytes_ in trie.levels:
        from_ = state[parents]
        live = from_ >= 0
        if not live.any():
            break
        if not live.all():
            nodes, from_, bytes_ = nodes[live], from_[live], bytes_[live]
        to = table.table[from_, bytes_]
        unknown = to == UNKNOWN
        if unknown.any():
            pairs = np.unique(from_[unknown].astype(np.int64) * 256 + bytes_[unknown])
            for pair in pairs.tolist():
                transition(*divmod(pair, 256))
            to = table.table[from_, bytes_]  # (the table may have grown: read it again)
        state[nodes] = to
    alive = state >= 0
    alive[0] = False  # the root: a token without bytes
    return (trie.token_node >= 0) & alive[np.maximum(trie.token_node, 0)]
