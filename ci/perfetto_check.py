#!/usr/bin/env python3
"""Checks evring's binary traces against Perfetto's own trace schema and import rules.

    python3 ci/perfetto_check.py FILE.pftrace...     (ci/perfetto-check.sh sets it up)

Decodes each file with `perfetto_trace_pb2` (generated from Perfetto's
perfetto_trace.proto, shipped in PyPI's `perfetto` package; no trace_processor
binary needed) and replays what Perfetto's importer does with it, as read from its
source (proto_trace_reader.cc, clock_synchronizer.cc, track_event_event_importer.h):

* no field unknown to Perfetto's schema, at any depth;
* sequence clocks: a ClockSnapshot on the sequence defines them; incremental ones
  add each packet's timestamp (an int64 delta) to their last value; the default
  clock comes from TracePacketDefaults; every timestamp resolves to BOOTTIME (the
  trace clock) through a snapshot;
* every interned id (category, name, annotation name, string value) resolves in its
  sequence's interned state at that packet;
* after sorting all events by time (Perfetto sorts; ties keep file order), each
  track's slice begins and ends pair as a stack exactly as the file paired them
  (begin, then its end): no slice mis-nested, none left open in a whole file;
* flows: a terminating flow id must be active (its parent's begin sorted earlier)
  when the event naming it (evring: the child's end) is imported; arrows bound and
  dropped are counted;
* slices that close another slice than the one written are reported, and told
  apart from the overlaps evring counted (`perfetto_overlaps`: a lane at its
  64-track limit).

Exit status 1 if any file breaks a rule; a summary line per file either way.
"""
import sys

from google.protobuf import unknown_fields
from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as pb

BOOTTIME, MONOTONIC = 6, 3
SLICE_BEGIN, SLICE_END = 1, 2
INCREMENTAL_STATE_CLEARED = 1


def unknown(msg, path="packet"):
    """Paths of unknown fields in `msg` and its submessages."""
    out = []
    if len(unknown_fields.UnknownFieldSet(msg)):
        out.append(path)
    for fd, v in msg.ListFields():
        if fd.type != fd.TYPE_MESSAGE:
            continue
        items = v if getattr(fd, "is_repeated", None) or hasattr(v, "__len__") and not hasattr(v, "ListFields") else [v]
        for i, m in enumerate(items):
            out += unknown(m, f"{path}.{fd.name}")
    return out


def s64(v):
    return v - (1 << 64) if v >= 1 << 63 else v


class Seq:
    def __init__(self):
        self.clear()
        self.clocks = {}  # id -> [incremental, last, boottime - value at snapshot]

    def clear(self):
        self.default_clock = None
        self.cats, self.names, self.keys, self.strings = {}, {}, {}, {}


def check(path):
    data = open(path, "rb").read()
    trace = pb.Trace()
    trace.ParseFromString(data)
    problems, seqs, events, overlaps, lanes = [], {}, [], 0, {}
    for n, p in enumerate(trace.packet):
        for u in unknown(p):
            problems.append(f"packet {n}: unknown field in {u}")
        sid = p.trusted_packet_sequence_id
        st = seqs.setdefault(sid, Seq())
        if p.sequence_flags & INCREMENTAL_STATE_CLEARED:
            st.clear()
        if p.HasField("trace_packet_defaults"):
            d = p.trace_packet_defaults
            st.default_clock = d.timestamp_clock_id if d.HasField("timestamp_clock_id") else None
        if p.HasField("interned_data"):
            i = p.interned_data
            for m, lst in ((st.cats, i.event_categories), (st.names, i.event_names),
                           (st.keys, i.debug_annotation_names)):
                for e in lst:
                    m[e.iid] = e.name
            for e in i.debug_annotation_string_values:
                st.strings[e.iid] = e.str
        if p.HasField("clock_snapshot"):
            clocks = {c.clock_id: c for c in p.clock_snapshot.clocks}
            boot = clocks.get(BOOTTIME)
            if boot is None:
                problems.append(f"packet {n}: clock snapshot without BOOTTIME")
                continue
            for cid, c in clocks.items():
                if c.is_incremental and not 64 <= cid < 128:
                    problems.append(f"packet {n}: incremental clock {cid} is not sequence-scoped")
                if 64 <= cid < 128:
                    st.clocks[cid] = [c.is_incremental, c.timestamp,
                                      boot.timestamp - c.timestamp]
            continue
        if p.HasField("track_descriptor"):
            d = p.track_descriptor
            lanes[(sid, d.uuid)] = (d.parent_uuid, d.name)
        if not p.HasField("track_event"):
            continue
        ev = p.track_event
        cid = p.timestamp_clock_id if p.HasField("timestamp_clock_id") else st.default_clock
        if cid is not None and 64 <= cid < 128:
            if cid not in st.clocks:
                problems.append(f"packet {n}: clock {cid} never snapshotted on sequence {sid}")
                continue
            c = st.clocks[cid]
            c[1] = c[1] + s64(p.timestamp) if c[0] else p.timestamp
            ts = c[1] + c[2]
        else:
            problems.append(f"packet {n}: timestamp on clock {cid}, not a sequence clock")
            continue
        for iid in ev.category_iids:
            if iid not in st.cats:
                problems.append(f"packet {n}: category iid {iid} unresolved")
        if ev.HasField("name_iid") and ev.name_iid not in st.names:
            problems.append(f"packet {n}: name iid {ev.name_iid} unresolved")
        for a in ev.debug_annotations:
            if a.HasField("name_iid") and a.name_iid not in st.keys:
                problems.append(f"packet {n}: annotation name iid {a.name_iid} unresolved")
            if a.HasField("string_value_iid") and a.string_value_iid not in st.strings:
                problems.append(f"packet {n}: string iid {a.string_value_iid} unresolved")
        events.append((ts, n, ev.type, (sid, ev.track_uuid), list(ev.flow_ids),
                       list(ev.terminating_flow_ids)))
        if ev.name == "evring.summary":
            for a in ev.debug_annotations:
                if a.name == "perfetto_overlaps":
                    overlaps += a.uint_value
    # File pairing: evring writes each slice's begin, then its end, on one track.
    file_pair, open_at = {}, {}
    for ts, n, ty, track, _, _ in events:
        if ty == SLICE_BEGIN:
            open_at[track] = n
        elif ty == SLICE_END and track in open_at:
            file_pair[open_at.pop(track)] = n
    # Where each flow starts (an arrow from a slice that begins after the
    # child ended cannot be drawn: a fact of the data, not of the encoding).
    source_ts = {}
    for ts, n, ty, track, flows, _ in events:
        for f in flows:
            source_ts[f] = ts
    # Perfetto's import: sorted by time (stable), a stack per track.
    stacks, active, bound, dropped, slices, misnested = {}, set(), 0, 0, 0, 0
    backward = shared = 0
    # A lane at evring's 64-track limit shares tracks (counted as overlaps).
    per_lane = {}
    for (sid, uuid), key in lanes.items():
        per_lane.setdefault((sid,) + key, []).append((sid, uuid))
    full = {t for ts in per_lane.values() if len(ts) >= 64 for t in ts}
    for ts, n, ty, track, flows, terminating in sorted(events, key=lambda e: (e[0], e[1])):
        # Flows are imported with the event that names them, begin or end.
        for f in flows:
            active.add(f)
        for f in terminating:
            if f in active:
                active.discard(f)
                bound += 1
            elif source_ts.get(f, -1) > ts:
                backward += 1
            else:
                dropped += 1
        if ty == SLICE_BEGIN:
            stacks.setdefault(track, []).append(n)
            slices += 1
        elif ty == SLICE_END:
            st = stacks.get(track)
            if not st:
                problems.append(f"packet {n}: slice end with nothing open on its track")
                continue
            b = st.pop()
            if file_pair.get(b) != n:
                if track in full:
                    shared += 1
                else:
                    misnested += 1
    left_open = sum(len(s) for s in stacks.values())
    if misnested:
        problems.append(f"{misnested} slice ends close another slice than the one written "
                        f"on tracks of lanes below the 64-track limit")
    if shared and not overlaps:
        problems.append(f"{shared} mis-nested ends on full lanes but no overlap counted")
    complete = any(p.HasField("track_event") and p.track_event.name == "evring.summary"
                   for p in trace.packet[-3:])
    if complete and left_open:
        problems.append(f"{left_open} slices left open in a whole file")
    if dropped:
        problems.append(f"{dropped} arrows dropped (child imported before its parent's begin)")
    print(f"{path}: {len(trace.packet)} packets, {slices} slices, {bound} arrows bound, "
          f"{backward} from a parent that began after its child ended (not drawable), "
          f"{dropped} dropped; {shared} ends mis-nested on full lanes ({overlaps} overlaps counted), "
          f"{misnested} elsewhere; "
          f"{len(seqs)} sequence(s): "
          + ("ok" if not problems else f"{len(problems)} problem(s)"))
    for p in problems[:10]:
        print(f"  {p}")
    return not problems


if __name__ == "__main__":
    files = sys.argv[1:] or sys.exit(__doc__)
    ok = all([check(f) for f in files])
    sys.exit(0 if ok else 1)
