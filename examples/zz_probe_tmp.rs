// THROWAWAY probe (delete after use).
use evring::TaggedSlab;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Barrier;
use std::time::Instant;

fn main() {
    let n: u64 = std::env::args()
        .nth(1)
        .map(|s| s.parse().unwrap())
        .unwrap_or(2_000_000);
    let threads: usize = std::env::args()
        .nth(2)
        .map(|s| s.parse().unwrap())
        .unwrap_or(2);
    for round in 0..5 {
        let ev = TaggedSlab::<u64>::new(4096);
        for i in 0..1000 {
            ev.insert(i).unwrap();
        }
        let fulls = AtomicU64::new(0);
        let retries = AtomicU64::new(0);
        let bar = Barrier::new(threads);
        let t = std::thread::scope(|s| {
            let hs: Vec<_> = (0..threads)
                .map(|_| {
                    s.spawn(|| {
                        bar.wait();
                        let t = Instant::now();
                        let mut first_full = None;
                        for i in 0..n {
                            let id = loop {
                                match ev.insert(i) {
                                    Ok(id) => break id,
                                    Err(_) => {
                                        if first_full.is_none() {
                                            first_full = Some(i);
                                        }
                                        retries.fetch_add(1, Relaxed);
                                        std::thread::yield_now();
                                    }
                                }
                            };
                            let g = evring::pin();
                            std::hint::black_box(ev.get(id, &g));
                            std::hint::black_box(ev.retire(id, &g));
                        }
                        if first_full.is_some() {
                            fulls.fetch_add(1, Relaxed);
                        }
                        (t.elapsed(), first_full)
                    })
                })
                .collect();
            hs.into_iter()
                .map(|h| h.join().unwrap())
                .collect::<Vec<_>>()
        });
        println!(
            "round {round}: {:?} threads_hit_full={} retries={} stats={:?}",
            t.iter()
                .map(|(d, f)| (d.as_nanos() as f64 / n as f64, *f))
                .collect::<Vec<_>>(),
            fulls.load(Relaxed),
            retries.load(Relaxed),
            ev.stats()
        );
    }
}
