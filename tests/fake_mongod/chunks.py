"""Shard keys and chunk maps of the fake cluster: which shard owns which documents of a sharded collection.

Two shard keys are modelled, the ones the engine may use: `{p: 1, _id: 1}` and `{_id: "hashed"}`. A chunk is
a half-open range `[low, high)` of one number per document, its *key value*: `p` for the compound key, the
pinned hash of `_id` for the hashed one. Chunk boundaries are on that number only: every bound of the
compound key is `{p: n, _id: MinKey}` (a real cluster may split between two `_id`s of one `p`; this map never
does), and -inf/+inf stand for MinKey/MaxKey.

The hash is the fake's own (MD5 of the BSON-encoded `_id`, first 8 bytes as a signed little-endian int64):
pinned so runs are deterministic, not MongoDB's, so a hashed chunk's bounds differ from a real cluster's.
"""

from __future__ import annotations

import hashlib
import math
import uuid
from dataclasses import dataclass, field
from typing import Any

import bson
from bson import Binary, Int64, MaxKey, MinKey, ObjectId

COMPOUND_KEY: dict[str, Any] = {"p": 1, "_id": 1}
HASHED_KEY: dict[str, Any] = {"_id": "hashed"}
SHARD_KEYS = (COMPOUND_KEY, HASHED_KEY)
PARTITION = "p"
_INT64 = 2**63


def pinned_hash(value: Any) -> int:
    """The fake's hash of an `_id` (not MongoDB's): deterministic across runs and processes."""
    digest = hashlib.md5(bson.encode({"": value}), usedforsecurity=False).digest()
    return int.from_bytes(digest[:8], "little", signed=True)


def is_number(value: Any) -> bool:
    return isinstance(value, int | float | Int64) and not isinstance(value, bool)


def same_key(a: Any, b: Any) -> bool:
    """Two key patterns are the same: same fields, in the same order, with the same values."""
    return isinstance(a, dict) and isinstance(b, dict) and list(a.items()) == list(b.items())


@dataclass
class Chunk:
    low: float
    high: float
    shard: str
    id: ObjectId = field(default_factory=ObjectId)

    def holds(self, value: float) -> bool:
        return self.low <= value < self.high


@dataclass
class ZoneRange:
    low: float
    high: float
    zone: str
    id: ObjectId = field(default_factory=ObjectId)


@dataclass
class ShardedCollection:
    """One sharded namespace: its key and its chunks (sorted, contiguous, from -inf to +inf)."""

    namespace: str
    key: dict[str, Any]
    chunks: list[Chunk]
    uuid: Binary = field(default_factory=lambda: Binary.from_uuid(uuid.uuid4()))
    epoch: ObjectId = field(default_factory=ObjectId)

    @property
    def hashed(self) -> bool:
        return same_key(self.key, HASHED_KEY)

    @property
    def key_fields(self) -> tuple[str, ...]:
        """The shard key's fields other than `_id` (what `documentKey` carries before `_id`)."""
        return tuple(name for name in self.key if name != "_id")

    def key_value(self, document: dict[str, Any]) -> float | None:
        """The number the chunk map places `document` by; None when the document lacks it."""
        if self.hashed:
            return float(pinned_hash(document["_id"])) if "_id" in document else None
        value: Any = document.get(PARTITION)
        return float(value) if is_number(value) else None

    def owner(self, value: float) -> str:
        return next(chunk.shard for chunk in self.chunks if chunk.holds(value))

    def shards(self) -> set[str]:
        return {chunk.shard for chunk in self.chunks}

    def split(self, at: float) -> None:
        """Make `at` a chunk boundary (no-op at ±inf or where one already is)."""
        if math.isinf(at):
            return
        for index, chunk in enumerate(self.chunks):
            if chunk.low < at < chunk.high:
                self.chunks[index : index + 1] = [
                    Chunk(chunk.low, at, chunk.shard),
                    Chunk(at, chunk.high, chunk.shard),
                ]
                return

    def assign(self, low: float, high: float, shard: str) -> None:
        """Every chunk inside `[low, high)` belongs to `shard` (split at both ends first)."""
        self.split(low)
        self.split(high)
        for chunk in self.chunks:
            if low <= chunk.low and chunk.high <= high and chunk.shard != shard:
                chunk.shard = shard
                chunk.id = ObjectId()

    def bound(self, value: float) -> dict[str, Any]:
        """A chunk or zone bound as the config server writes it."""
        if self.hashed:
            return {"_id": _bound_value(value, hashed=True)}
        return {PARTITION: _bound_value(value, hashed=False), "_id": MinKey()}

    def parse_bound(self, bound: Any, what: str) -> float:
        """A bound a command gives (`{p: n, _id: MinKey}`, or MinKey/MaxKey for `p`) as a number; ValueError
        for any other shape."""
        if self.hashed:
            raise ValueError(f"{what}: ranges of a hashed shard key are not modelled by the fake cluster")
        if not isinstance(bound, dict) or list(bound) not in ([PARTITION, "_id"], [PARTITION]):
            raise ValueError(
                f"{what} must be {{p: <number>, _id: MinKey}} for the shard key {{p: 1, _id: 1}}"
            )
        if "_id" in bound and not isinstance(bound["_id"], MinKey):
            raise ValueError(
                f"{what}: the fake cluster splits on p only, so _id must be MinKey in every bound"
            )
        value = bound[PARTITION]
        if isinstance(value, MinKey):
            return -math.inf
        if isinstance(value, MaxKey):
            return math.inf
        if not is_number(value):
            raise ValueError(f"{what}: p must be a number, MinKey or MaxKey, got {value!r}")
        return float(value)


def initial_chunks(key: dict[str, Any], shards: list[str], primary: str) -> list[Chunk]:
    """The chunks right after shardCollection: one on the primary shard for `{p, _id}`; for a hashed key,
    the int64 range split evenly, one chunk per shard (a real hashed shardCollection pre-splits too)."""
    if not same_key(key, HASHED_KEY):
        return [Chunk(-math.inf, math.inf, primary)]
    width = 2 * _INT64 // len(shards)
    lows = [-math.inf] + [float(-_INT64 + width * index) for index in range(1, len(shards))]
    highs = [*lows[1:], math.inf]
    return [Chunk(low, high, shard) for low, high, shard in zip(lows, highs, shards, strict=True)]


def _bound_value(value: float, *, hashed: bool) -> Any:
    if value == -math.inf:
        return MinKey()
    if value == math.inf:
        return MaxKey()
    return Int64(int(value)) if hashed else int(value)
