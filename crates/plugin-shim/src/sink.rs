//! Consumers of completed records beside the trace files: the seam where a
//! metrics exporter (or a user's own sink) plugs into the writer thread.
//!
//! The writer hands every record it takes off the ring to each sink, on its
//! own thread, after the record's trace file got it; NCCL's threads never
//! see a sink. A sink adds values to a stream's footer (`evring.summary`),
//! so its final figures land in the trace too. Trace formats themselves are
//! encoders of the trace files ([`crate::format`]), not sinks: every stream
//! has exactly one file, in one format.

use crate::format::Field;
use crate::perfetto::StreamInfo;
use crate::record::Record;
use crate::trace::End;

/// A consumer of completed records, called on the writer thread only.
///
/// Streams are the trace files' streams (a communicator's rank, or the
/// detached stream, key 0): `open` when the communicator's file is set up,
/// `footer` and then `close` when it ends. With trace files off
/// (`NCCL_PROFILE_DUMP_FILE` empty) sinks still get every record and the
/// `open` and `close` of every stream; `footer` is not asked for (there is
/// no file to put it in).
pub trait Sink: Send {
    /// Stream `ctx` begins.
    fn open(&mut self, _ctx: u64, _stream: &StreamInfo) {}
    /// One completed record of stream `ctx`.
    fn record(&mut self, ctx: u64, rec: &Record);
    /// Values to add to the footer of stream `ctx`, written just before `close`.
    fn footer(&mut self, _ctx: u64, _out: &mut Vec<(String, Field)>) {}
    /// Flush buffered output: every 200 ms and on `evring_flush`.
    fn flush(&mut self) {}
    /// Stream `ctx` ended: finalized, last finalize, or process exit.
    fn close(&mut self, _ctx: u64, _end: End) {}
}

/// The sinks of the writer thread, called in the order they were added.
#[derive(Default)]
pub struct Sinks {
    list: Vec<Box<dyn Sink>>,
}

impl Sinks {
    pub fn add(&mut self, s: Box<dyn Sink>) {
        self.list.push(s);
    }

    pub fn is_empty(&self) -> bool {
        self.list.is_empty()
    }

    pub fn open(&mut self, ctx: u64, stream: &StreamInfo) {
        self.list.iter_mut().for_each(|s| s.open(ctx, stream));
    }

    pub fn record(&mut self, ctx: u64, rec: &Record) {
        self.list.iter_mut().for_each(|s| s.record(ctx, rec));
    }

    /// Every sink's footer values for `ctx`, in sink order.
    pub fn footer(&mut self, ctx: u64) -> Vec<(String, Field)> {
        let mut out = Vec::new();
        self.list.iter_mut().for_each(|s| s.footer(ctx, &mut out));
        out
    }

    pub fn flush(&mut self) {
        self.list.iter_mut().for_each(|s| s.flush());
    }

    pub fn close(&mut self, ctx: u64, end: End) {
        self.list.iter_mut().for_each(|s| s.close(ctx, end));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_records::{info, records};
    use std::sync::{Arc, Mutex};

    /// Counts records per stream and reports the count in the footer.
    struct Count {
        seen: Arc<Mutex<Vec<String>>>,
        n: u64,
    }

    impl Sink for Count {
        fn open(&mut self, ctx: u64, _: &StreamInfo) {
            self.seen.lock().unwrap().push(format!("open {ctx}"));
        }
        fn record(&mut self, _: u64, _: &Record) {
            self.n += 1;
        }
        fn footer(&mut self, _: u64, out: &mut Vec<(String, Field)>) {
            out.push(("count_records".into(), Field::U64(self.n)));
        }
        fn flush(&mut self) {
            self.seen.lock().unwrap().push("flush".into());
        }
        fn close(&mut self, ctx: u64, end: End) {
            self.seen
                .lock()
                .unwrap()
                .push(format!("close {ctx} {}", end.name()));
        }
    }

    #[test]
    fn every_sink_sees_every_call_in_order() {
        let seen = Arc::new(Mutex::new(Vec::new()));
        let mut sinks = Sinks::default();
        assert!(sinks.is_empty());
        for _ in 0..2 {
            sinks.add(Box::new(Count {
                seen: seen.clone(),
                n: 0,
            }));
        }
        sinks.open(7, &info());
        for r in records() {
            sinks.record(7, &r);
        }
        sinks.flush();
        let f = sinks.footer(7);
        sinks.close(7, End::Finalize);
        let n = records().len() as u64;
        assert_eq!(
            f,
            vec![
                ("count_records".to_string(), Field::U64(n)),
                ("count_records".to_string(), Field::U64(n))
            ]
        );
        assert_eq!(
            *seen.lock().unwrap(),
            [
                "open 7",
                "open 7",
                "flush",
                "flush",
                "close 7 finalize",
                "close 7 finalize"
            ]
        );
    }
}
