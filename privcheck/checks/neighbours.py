"""Neighbouring datasets for checks that drive a user's real training on coupled runs (docs/whole_step.md,
"Neighbours"): the whole-step checks (`privcheck.checks.whole_step`) and any check that runs the user's code on
D and D' with one record added or removed.

A `Pair` is (label, small, big, index): `big` is `small` plus one record, the differing one, at `big[index]`.
Two runs on `small` and `big` with one seed are compared; the comparison means something only when the runs are
*coupled*: every shared record keeps its sampling coin, its rollout randomness and the noise. How a pair keeps the
shared records coupled depends on the removal mode and on how the user's code keys its coins (`coupling`):

- removal "absent" (a fixed universe of slots, an absent slot holds the `absent` placeholder): every dataset has
  the same length and a shared record keeps its slot, so the differing record can sit in ANY slot: first,
  middle or last. `shared_index(j) == j`.
- removal "drop", coupling "index" (coins drawn per dataset index, e.g. one coin per position of a list): a shared
  record keeps its coin only if it keeps its index, so the differing record must be the LAST one of `big`
  (insertion anywhere else shifts the records after it onto other coins). Only position "last" is supported;
  the other positions are reported as not covered.
- removal "drop", coupling "record" (coins keyed by a stable record identity, so a record keeps its draws
  wherever it sits): any position; `shared_index(j) = j + (j >= index)`. The records of one dataset must then be
  distinct (equal records would share their coins), which the search respects.

Positions are named among the present records of `big`: "first" (no record before it), "last" (none after it),
"middle" (records before and after), "alone" (the only one). `pairs` builds the deterministic pairs (add at each
position, remove each record, the empty base, a small base); `search_pairs` draws further pairs with hypothesis
(a dev dependency, imported only there) from the records and an adversarial `pool` (records that collide with
others on a prompt, extreme rewards or gradient norms), deterministic given its seed.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Sequence

from privcheck.errors import InvalidParameter

__all__ = ["CASES", "COUPLINGS", "POSITIONS", "REMOVALS", "Pair", "coverage", "pairs", "position_of",
           "search_pairs", "search_strategy", "supported_positions"]

CASES = ("add", "remove", "empty", "small")
REMOVALS = ("drop", "absent")
COUPLINGS = ("index", "record")
POSITIONS = ("first", "middle", "last")


@dataclass(frozen=True)
class Pair:
    """Neighbouring datasets: `big` is `small` plus the differing record at `big[index]`.

    `position` ("first", "middle", "last", "alone") is its place among big's present records; `kind` names what
    the differing record is ("addition", "record", or a pool kind); `searched` marks a pair drawn by the search.
    """

    label: str
    small: tuple
    big: tuple
    index: int
    position: str = "last"
    kind: str = "addition"
    searched: bool = False

    def shared_index(self, j: int) -> int:
        """Index in `big` of `small[j]` (the same record, coupled)."""
        return j + (j >= self.index) if len(self.big) == len(self.small) + 1 else j


def _absent(removal, absent, x) -> bool:
    return removal == "absent" and x is absent


def position_of(big: Sequence, index: int, *, removal: str = "drop", absent: Any = None) -> str:
    """Place of `big[index]` among the present records of `big`: "alone", "first", "middle" or "last"."""
    present = [i for i, x in enumerate(big) if not _absent(removal, absent, x)]
    if len(present) <= 1:
        return "alone"
    rank = present.index(index)
    return "first" if rank == 0 else ("last" if rank == len(present) - 1 else "middle")


def _check_mode(removal, coupling) -> None:
    if removal not in REMOVALS:
        raise InvalidParameter("removal", removal, f"one of {REMOVALS}")
    if coupling not in COUPLINGS:
        raise InvalidParameter("coupling", coupling, f"one of {COUPLINGS}")


def supported_positions(removal: str, coupling: str = "index") -> tuple[str, ...]:
    """The positions of the differing record that keep the shared records coupled (module docstring)."""
    _check_mode(removal, coupling)
    return ("last",) if (removal, coupling) == ("drop", "index") else POSITIONS


def _positions(positions) -> tuple[str, ...]:
    positions = POSITIONS if positions is None else tuple(positions)
    if not positions or not set(positions) <= set(POSITIONS) or len(set(positions)) != len(positions):
        raise InvalidParameter("positions", positions, f"a non-empty subset of {POSITIONS}")
    return positions


def _slot(k: int, position: str) -> int:
    """Where the addition goes among k shared records: before all, after half of them, after all."""
    return {"first": 0, "middle": k // 2, "last": k}[position]


def pairs(records: Sequence, addition: Any, *, removal: str = "drop", absent: Any = None, coupling: str = "index",
          cases: Sequence[str] = CASES, small_base: int = 1, positions: Sequence[str] | None = None) -> list[Pair]:
    """The deterministic neighbouring pairs, in order of `cases`:

    "add" — D = `records` against D plus `addition` at each requested position supported by the coupling
    (`supported_positions`; "absent": the addition takes slot 0 / k//2 / k of a universe of k + 1 slots, the other
    slots holding `records` in order); "remove" — D against D minus each record (at its own index when the
    coupling allows, else moved last); "empty" — nothing against `addition` alone; "small" — the first
    `small_base` records against them plus `addition` last (a small dataset that is sometimes sampled in full).
    Labels: "add@<position>", "remove[i]", "empty", "small"."""
    _check_mode(removal, coupling)
    positions = _positions(positions)
    R, x, k = list(records), addition, len(records)
    A = absent
    allowed = [p for p in positions if p in supported_positions(removal, coupling)]
    out: list[Pair] = []
    for case in cases:
        if case not in CASES:
            raise InvalidParameter("cases", tuple(cases), f"a non-empty subset of {CASES}")
        if case == "add":
            seen = set()
            for p in allowed:
                i = _slot(k, p)
                if i in seen:          # k = 1: "middle" is "last"
                    continue
                seen.add(i)
                big = R[:i] + [x] + R[i:]
                small = R[:i] + [A] + R[i:] if removal == "absent" else list(R)
                out.append(Pair(f"add@{p}", tuple(small), tuple(big), i,
                                position_of(big, i, removal=removal, absent=A)))
        elif case == "remove":
            for i in range(k):
                if _absent(removal, A, R[i]):
                    continue
                if removal == "absent":
                    small, big, idx = [A if j == i else r for j, r in enumerate(R)] + [A], R + [A], i
                elif coupling == "record":
                    small, big, idx = R[:i] + R[i + 1:], list(R), i
                else:                     # index coupling: moved last, the others keep their index
                    rest = R[:i] + R[i + 1:]
                    small, big, idx = rest, rest + [R[i]], k - 1
                out.append(Pair(f"remove[{i}]", tuple(small), tuple(big), idx,
                                position_of(big, idx, removal=removal, absent=A), kind="record"))
        elif case == "empty":
            if removal == "absent":
                out.append(Pair("empty", tuple([A] * (k + 1)), tuple([A] * k + [x]), k, "alone"))
            else:
                out.append(Pair("empty", (), (x,), 0, "alone"))
        else:   # "small"
            if removal == "absent":
                present = [i for i, r in enumerate(R) if r is not A]
                keep = set(present[:small_base])
                base = [r if j in keep else A for j, r in enumerate(R)]
                small, big = base + [A], base + [x]
            else:
                small, big = R[:small_base], R[:small_base] + [x]
            out.append(Pair("small", tuple(small), tuple(big), k if removal == "absent" else small_base,
                            position_of(big, len(big) - 1, removal=removal, absent=A)))
    return out


# --------------------------------------------------------------------------------------------- search

def search_strategy(records: Sequence, addition: Any, *, removal: str = "drop", absent: Any = None,
                    coupling: str = "index", pool: Mapping[str, Any] | None = None,
                    positions: Sequence[str] | None = None):
    """A hypothesis strategy of `Pair`s drawn from `records`, `addition` and the adversarial `pool`
    ({kind: record}). The differing record is any candidate; the shared records are any candidates (repeats
    allowed unless removal "drop" with record coupling), each slot possibly absent ("absent": a universe of
    len(records) + 1 slots, so 0 to len(records) shared records; "drop": 0 to len(records) + 1 shared records);
    its position is drawn from `positions` ∩ `supported_positions`. Requires hypothesis."""
    from hypothesis import strategies as st

    _check_mode(removal, coupling)
    allowed = [p for p in _positions(positions) if p in supported_positions(removal, coupling)]
    cands = [(f"record[{i}]", r) for i, r in enumerate(records) if not _absent(removal, absent, r)]
    cands.append(("addition", addition))
    cands += [(str(k), r) for k, r in (pool or {}).items()]
    n_cands, k = len(cands), len(records)
    distinct = removal == "drop" and coupling == "record"
    width = k if removal == "absent" else k + 1

    @st.composite
    def make(draw):
        d = draw(st.integers(0, n_cands - 1), label="differing")
        others = [j for j in range(n_cands) if not (distinct and j == d)]
        if removal == "absent":
            shared = draw(st.lists(st.one_of(st.none(), st.sampled_from(others)), min_size=width,
                                   max_size=width), label="shared")
        else:
            shared = draw(st.lists(st.sampled_from(others), max_size=width, unique=distinct), label="shared")
        shared = [None if j is None else cands[j][1] for j in shared]
        position = draw(st.sampled_from(allowed), label="position")
        present = [i for i, r in enumerate(shared) if r is not None]
        m = len(present)
        rank = {"first": 0, "middle": m // 2, "last": m}[position]
        i = present[rank] if rank < m else (present[-1] + 1 if present else 0)
        if removal == "absent":
            # a universe of k + 1 slots: the differing record takes slot i, the others shift right
            slots = [absent if r is None else r for r in shared]
            i = min(i, k)
            big = slots[:i] + [cands[d][1]] + slots[i:]
            small = slots[:i] + [absent] + slots[i:]
        else:
            big = list(shared[:i]) + [cands[d][1]] + list(shared[i:])
            small = list(shared)
        label = f"search:{cands[d][0]}@{position_of(big, i, removal=removal, absent=absent)}"
        return Pair(label, tuple(small), tuple(big), i, position_of(big, i, removal=removal, absent=absent),
                    kind=cands[d][0], searched=True)

    return make()


def search_pairs(records: Sequence, addition: Any, *, removal: str = "drop", absent: Any = None,
                 coupling: str = "index", pool: Mapping[str, Any] | None = None, examples: int = 32, seed: int = 0,
                 positions: Sequence[str] | None = None) -> list[Pair]:
    """`examples` pairs: first a sweep that puts every pool record (then the addition) in front of the records
    (position "first" when supported, else "last": the adversarial kinds are each covered once whatever the
    draw), then pairs drawn by `search_strategy` with hypothesis at a fixed seed (`hypothesis.seed(seed)`, no
    example database: the same pairs every run). Labels are made unique ("#n" suffix)."""
    if isinstance(examples, bool) or not isinstance(examples, int) or examples < 1:
        raise InvalidParameter("examples", examples, "an integer >= 1")
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise InvalidParameter("search_seed", seed, "an integer >= 0")
    _check_mode(removal, coupling)
    try:
        import hypothesis
        from hypothesis import HealthCheck, Phase, given, settings
    except ImportError as exc:   # pragma: no cover - hypothesis is a dev dependency
        raise InvalidParameter("neighbours", "search", "'positions' (the search needs hypothesis: "
                               "pip install privcheck[dev])") from exc
    allowed = [p for p in _positions(positions) if p in supported_positions(removal, coupling)]
    front = "first" if "first" in allowed else allowed[-1]
    R = [r for r in records if not _absent(removal, absent, r)]
    sweep = []
    for kind, rec in list((pool or {}).items()) + [("addition", addition)]:
        i = 0 if front == "first" else len(R)
        big = R[:i] + [rec] + R[i:]
        if removal == "absent":
            big = big + [absent] * (len(records) + 1 - len(big))
            small = [absent if j == i else r for j, r in enumerate(big)]
        else:
            small = R
        if removal == "absent" and len(big) > len(records) + 1:
            continue
        sweep.append(Pair(f"sweep:{kind}@{front}", tuple(small), tuple(big), i,
                          position_of(big, i, removal=removal, absent=absent), kind=str(kind), searched=True))
    out = sweep[:examples]
    drawn: list[Pair] = []
    need = examples - len(out)
    if need > 0:
        strategy = search_strategy(records, addition, removal=removal, absent=absent, coupling=coupling, pool=pool,
                                   positions=positions)

        @settings(max_examples=need, database=None, deadline=None, phases=(Phase.generate,),
                  suppress_health_check=list(HealthCheck), derandomize=False)
        @hypothesis.seed(seed)
        @given(strategy)
        def collect(pair):
            if len(drawn) < need:
                drawn.append(pair)

        collect()
    counts: dict[str, int] = {}
    for p in out + drawn:
        n = counts.get(p.label, 0)
        counts[p.label] = n + 1
        if n:
            p = Pair(f"{p.label}#{n}", p.small, p.big, p.index, p.position, p.kind, p.searched)
        if p not in out:
            out.append(p)
    return out


def coverage(pair_list: Sequence[Pair], *, removal: str = "drop", absent: Any = None) -> dict:
    """What a list of pairs covers: positions, kinds of differing record, sizes of `big` (present records)."""
    pos: dict[str, int] = {}
    kinds: dict[str, int] = {}
    sizes: dict[int, int] = {}
    for p in pair_list:
        pos[p.position] = pos.get(p.position, 0) + 1
        kinds[p.kind] = kinds.get(p.kind, 0) + 1
        m = sum(not _absent(removal, absent, x) for x in p.big)
        sizes[m] = sizes.get(m, 0) + 1
    return {"pairs": len(pair_list), "positions": pos, "kinds": kinds,
            "dataset_sizes": {str(k): v for k, v in sorted(sizes.items())}}

