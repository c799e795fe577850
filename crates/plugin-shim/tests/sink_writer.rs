//! A sink added to the real writer (in-process plugin, v6 table) sees every
//! record and its footer value lands in the binary trace's summary.

mod common;
use common::{init_comm, issue_allreduces};
use evring_perfetto::trace::Value;
use evring_shim::engine::Engine;
use evring_shim::exports::{evring_flush_wait, ncclProfiler_v6 as PLUGIN};
use evring_shim::format::Field;
use evring_shim::perfetto::StreamInfo;
use evring_shim::record::Record;
use evring_shim::sink::Sink;
use evring_shim::trace::End;
use std::sync::{Arc, Mutex};

#[derive(Default)]
struct Seen {
    opened: Vec<(u64, u64)>,
    records: u64,
    /// Every record as the writer had it: id, parent, start, end.
    all: Vec<(u64, u64, u64, u64)>,
    closed: Vec<(u64, &'static str)>,
}

struct Count(Arc<Mutex<Seen>>);

impl Sink for Count {
    fn open(&mut self, ctx: u64, s: &StreamInfo) {
        self.0.lock().unwrap().opened.push((ctx, s.comm_id));
    }
    fn record(&mut self, _: u64, r: &Record) {
        let mut s = self.0.lock().unwrap();
        if r.kind == evring_shim::model::Kind::Coll {
            s.records += 1;
        }
        s.all.push((r.id, r.parent, r.start_ns, r.end_ns));
    }
    fn footer(&mut self, _: u64, out: &mut Vec<(String, Field)>) {
        out.push((
            "sink_colls".into(),
            Field::U64(self.0.lock().unwrap().records),
        ));
    }
    fn close(&mut self, ctx: u64, end: End) {
        self.0.lock().unwrap().closed.push((ctx, end.name()));
    }
}

#[test]
fn a_sink_sees_every_record_and_adds_to_the_footer() {
    let dir = std::env::temp_dir().join(format!("evring-sink-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::env::set_var("NCCL_PROFILE_DUMP_FILE", dir.join("trace"));
    std::env::set_var("NCCL_PROFILE_EVENT_MASK", "2");
    std::env::set_var("EVRING_FORMAT", "perfetto");
    let ctx = init_comm(c"sink-test", 1, 0);
    let seen = Arc::new(Mutex::new(Seen::default()));
    Engine::try_get()
        .expect("engine after init")
        .writer
        .add_sink(Box::new(Count(seen.clone())));
    issue_allreduces(ctx, 300);
    // SAFETY: the context init gave us.
    assert_eq!(unsafe { (PLUGIN.finalize)(ctx) }, 0);
    assert_eq!(evring_flush_wait(10_000), 1);

    let s = seen.lock().unwrap();
    // The sink may have been taken after the stream's open: then it saw no open.
    assert!(s.opened.iter().all(|&(_, comm)| comm == 42));
    assert_eq!(s.records, 300, "every Coll record");
    assert_eq!(s.closed.len(), 1);
    assert_eq!(s.closed[0].1, "last_finalize");

    let bytes = std::fs::read(dir.join("trace_42_0.pftrace")).unwrap();
    let t = evring_perfetto::trace::read(&bytes);
    assert_eq!(
        t.slices.iter().filter(|s| s.category == "Coll").count(),
        300
    );
    assert_eq!(t.summary_value("sink_colls"), Some(&Value::Uint(300)));
    assert_eq!(t.summary_value("complete"), Some(&Value::Bool(true)));
    // The file, written by the real writer (file opened lazily, header first),
    // gives back every record the sink saw with exact ids and times: the
    // binary format's timestamps are deltas from the header's clock snapshot.
    let (_, recs) = evring_shim::perfetto::decode::read(&bytes);
    let file: Vec<_> = recs
        .iter()
        .map(|r| (r.id, r.parent, r.start_ns, r.end_ns))
        .collect();
    assert!(!file.is_empty());
    let seen: Vec<_> = s.all[s.all.len() - file.len()..].to_vec();
    assert_eq!(file, seen);
    let _ = std::fs::remove_dir_all(&dir);
}
