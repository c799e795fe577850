//! What a stream's footer says: why it ends, whether the trace is complete,
//! the file's record count and the process's counters. The encoders
//! ([`crate::format`]) turn these fields into the format's summary event.

use crate::clock::gpu_offset;
use crate::engine::Engine;
use crate::format::Field;

/// Why a footer was written (its `end` field).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum End {
    /// This communicator was finalized; others may still be open.
    Finalize,
    /// The last open communicator was finalized: nothing was live, the
    /// identities of docs/shim.md hold here.
    LastFinalize,
    /// The process exited without finalizing (exit handler).
    Exit,
    /// The file reached `EVRING_TRACE_LIMIT`; the stream goes on in its next part.
    Rotated,
}

impl End {
    pub fn name(self) -> &'static str {
        match self {
            End::Finalize => "finalize",
            End::LastFinalize => "last_finalize",
            End::Exit => "exit",
            End::Rotated => "rotated",
        }
    }
}

/// The summary that closes a stream: why it ends, whether the trace is
/// complete, this file's record count and the process's counters as of now.
///
/// `complete` is true only if nothing was dropped, unwritten or refused so
/// far, the stream was finalized, and, if this was the last finalize, the
/// accounting identities hold (nothing live, every start completed, every
/// completion consumed).
pub fn footer(
    engine: &Engine,
    end: End,
    stream_records: u64,
    stream_failed: bool,
) -> Vec<(&'static str, Field)> {
    let stats = engine.stats();
    let open = engine.open_comms().max(0);
    let finalized = matches!(end, End::Finalize | End::LastFinalize);
    let no_loss = engine.counters.start_drops() == 0
        && stats.drop_ring_full == 0
        && stats.write_errors == 0
        && stats.records_unwritten == 0
        && !stream_failed;
    let identities = stats.live == 0
        && stats.started == stats.completed
        && stats.completed == stats.records_consumed + stats.drop_ring_full;
    // Identities are required at the last finalize only: after an earlier
    // one other communicators' events may be open. Which finalize this is
    // comes with the command (`end`), not from the open count read now: the
    // writer may write an earlier finalize's footer after the application
    // has finalized the rest, when their last events are not yet assembled.
    let complete = finalized && no_loss && (end == End::Finalize || identities);
    let mut f = vec![
        ("finalized", Field::Bool(finalized)),
        ("complete", Field::Bool(complete)),
        ("end", Field::Str(end.name().to_string())),
        ("open_comms", Field::U64(open as u64)),
        ("stream_records", Field::U64(stream_records)),
        // The mask evring asked for, and the one in force (NCCL's int, read
        // now: NCCL or the application may have changed it since).
        ("mask_requested", Field::U64(engine.mask() as u32 as u64)),
    ];
    if let Some(m) = crate::config::nccl_mask() {
        f.push(("mask", Field::U64(m as u32 as u64)));
    }
    if let Some(off) = gpu_offset() {
        f.push(("gpu_offset_ns", Field::I64(off)));
    }
    f.extend(stats.fields().into_iter().map(|(k, v)| (k, Field::U64(v))));
    f
}
