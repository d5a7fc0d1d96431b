"""Every random stream of a run, by name: the one registry of the integer keys that
:func:`pflcore.training.derive_seed` mixes with the run's seed.

A stream is ``derive_seed(seed, *keys, *varying)``: fixed ``keys`` (its prefix), then the
values that vary (round, client, ...). Two streams draw independently when their key
tuples differ, in value or in length; a test checks that no two streams that can meet in
one run share a prefix and an arity. The values are those the runs recorded so far were
drawn with, so they cannot be renumbered: some prefixes are told apart only by belonging to
different methods (FedFA's anchors and pFedHN's hypernetwork both draw ``(13, 1)``, never
in the same run), and one pair is not told apart at all: SeedSequence pads its entropy
with zeros, so the schedule's round 0, ``(101, 0)``, has the seed of FedCP's conditional
vectors, ``(101,)`` (the schedule draws it with numpy's PCG64, FedCP with torch's
Mersenne Twister, so the numbers differ; :data:`KNOWN_CLASHES`).
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Stream:
    """One named random stream: its fixed keys, what varies after them, who draws it
    (``"run"``: the engine or data, in every run; else the method's name), and why."""

    name: str
    keys: tuple[int, ...]
    varying: tuple[str, ...]
    scope: str
    doc: str


STREAMS: dict[str, Stream] = {}


def _key(name: str, value: int, *, after: tuple[int, ...] = (), varying: tuple[str, ...] = (),
         scope: str = "run", doc: str = "") -> int:
    if name in STREAMS:
        raise ValueError(f"stream {name!r} is registered twice.")
    STREAMS[name] = Stream(name, (*after, value), varying, scope, doc)
    return value


# -- the engine's purposes: one stream per (purpose, round, client) ------------------------
TRAIN_KEY = _key("train", 11, varying=("round", "client"), doc="a client's local training (its batch order)")
EVAL_KEY = _key("evaluate", 12, varying=("round", "client"), doc="building a client's predictor for evaluation")
INIT_KEY = _key("init", 13, doc="the initial model's weights (methods' other initial weights: keys after it)")
COLLECT_KEY = _key("collect", 14, varying=("round", "client"), doc="a client's statistics for a collect phase")
SERVER_KEY = _key("server", 15, varying=("round", "phase"), doc="the server's own draws (ServerContext.generator)")
ADAPT_KEY = _key("adapt", 16, varying=("round", "client"), doc="a new client's adaptation before it is scored")

# -- the federation and its data ----------------------------------------------------------
SCHEDULE_KEY = _key("schedule", 101, varying=("round",), doc="a round's participants and drop-outs")
NEW_CLIENTS_KEY = _key("new_clients", 104, doc="which clients are held out as new clients")
SHIFT_KEY = _key("shift", 103, doc="a feature or concept shift's per-client draws")
CORRUPTION_KEY = _key("corruption", 104, varying=("client", "digest"), doc="a client's corruption noise")

# -- methods' own streams -------------------------------------------------------------------
PERFEDAVG_AUX_KEY = _key("perfedavg.aux", 102, scope="perfedavg",
                         doc="Per-FedAvg's second shuffle (D and D''), seeded from a draw of the client's stream")
FEDCP_CPN_KEY = _key("fedcp.contexts", 101, scope="fedcp",
                     doc="FedCP's initial conditional vectors v_i and random CPN inputs")
FEDCP_CPN_INIT_KEY = _key("fedcp.cpn", 101, after=(INIT_KEY,), scope="fedcp", doc="FedCP's initial CPN weights")
FEDFA_ANCHOR_KEY = _key("fedfa.anchors", 1, after=(INIT_KEY,), scope="fedfa", doc="FedFA's initial anchors")
PFEDHN_INIT_KEY = _key("pfedhn.hypernetwork", 1, after=(INIT_KEY,), scope="pfedhn",
                       doc="pFedHN's hypernetwork and embeddings")
FEDFOMO_SPLIT_KEY = _key("fedfomo.split", 41, varying=("client",), scope="fedfomo",
                         doc="a FedFomo client's fixed validation split")
FEDFOMO_PICK_KEY = _key("fedfomo.pick", 42, varying=("round", "client"), scope="fedfomo",
                        doc="a FedFomo client's candidate draws of a round")
PFEDFDA_MEANS_KEY = _key("pfedfda.means", 41, after=(INIT_KEY,), scope="pfedfda",
                         doc="pFedFDA's initial global means")
MOON_PROJECTION_KEY = _key("moon.projection", 41, after=(INIT_KEY,), scope="moon",
                           doc="MOON's projection head's initial weights")
FEDPROC_PROTOTYPE_KEY = _key("fedproc.prototypes", 42, after=(INIT_KEY,), scope="fedproc",
                             doc="FedProc's initial prototypes")
HYPCLUSTER_COPIES_KEY = _key("hypcluster.copies", 31, after=(INIT_KEY,), varying=("cluster",), scope="hypcluster",
                             doc="HypCluster's initial cluster models")


#: varying values that are never 0 (a content hash): they cannot vanish into zero padding
_NONZERO = {"digest"}

#: SeedSequence pads its entropy with zeros to 4 words (the seed and 3 keys), so up to that
#: length a trailing 0 key is no key at all: ``derive_seed(s, 101, 0) == derive_seed(s, 101)``.
_POOL_WORDS = 4


def _seen_as(stream: Stream) -> set[tuple[int, ...]]:
    """The key tuples, as SeedSequence sees them, that ``stream`` takes when its varying
    values that may be 0 are 0 (all it can share with a stream of another shape)."""
    if any(v in _NONZERO for v in stream.varying):
        return set()
    full = (*stream.keys, *(0 for _ in stream.varying))
    out = {full}
    while len(full) + 1 <= _POOL_WORDS and full and full[-1] == 0:
        full = full[:-1]
        out.add(full)
    return out


def clashes() -> list[tuple[str, str]]:
    """Pairs of streams that can meet in one run (same scope, or one of them the run's) and
    can be seeded alike: the same keys and arity, or one's keys the other's with trailing
    zero values that SeedSequence's padding makes vanish."""
    out = []
    streams = list(STREAMS.values())
    for i, a in enumerate(streams):
        for b in streams[i + 1:]:
            if not (a.scope == b.scope or "run" in (a.scope, b.scope)):
                continue
            same_shape = a.keys == b.keys and len(a.varying) == len(b.varying)
            if same_shape or _seen_as(a) & _seen_as(b):
                out.append((a.name, b.name))
    return out


#: Clashes kept because renumbering would change recorded runs' numbers (see the module's doc).
KNOWN_CLASHES = {("schedule", "fedcp.contexts")}

__all__ = ["KNOWN_CLASHES", "STREAMS", "Stream", "clashes", *[n for n in dir() if n.endswith("_KEY")]]
