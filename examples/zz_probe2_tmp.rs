// THROWAWAY probe (delete after use).
use std::hint::black_box;
use std::sync::{Barrier, Mutex};
use std::time::Instant;

fn two<F: Fn(u64) + Sync>(name: &str, n: u64, threads: usize, f: F) {
    let bar = Barrier::new(threads);
    let t: Vec<f64> = std::thread::scope(|s| {
        let hs: Vec<_> = (0..threads)
            .map(|_| {
                s.spawn(|| {
                    bar.wait();
                    let t = Instant::now();
                    for i in 0..n {
                        f(i)
                    }
                    t.elapsed().as_nanos() as f64 / n as f64
                })
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    });
    println!("{name} threads={threads}: {:?}", t);
}

fn main() {
    let n = 1_000_000;
    for threads in [1, 2] {
        let ev = evring::TaggedSlab::<u64>::new(4096);
        for i in 0..1000 {
            ev.insert(i).unwrap();
        }
        two("evring", n, threads, |i| {
            let id = loop {
                if let Ok(id) = ev.insert(i) {
                    break id;
                }
                std::thread::yield_now()
            };
            let g = evring::pin();
            black_box(ev.get(id, &g));
            black_box(ev.retire(id, &g));
        });
        let sh = sharded_slab::Slab::<u64>::new();
        for i in 0..1000 {
            sh.insert(i).unwrap();
        }
        two("sharded", n, threads, |i| {
            let k = sh.insert(i).unwrap();
            black_box(sh.get(k).map(|e| *e));
            black_box(sh.remove(k));
        });
        let mx = Mutex::new(slab::Slab::<u64>::with_capacity(4096));
        for i in 0..1000 {
            mx.lock().unwrap().insert(i);
        }
        two("mutex", n, threads, |i| {
            let k = mx.lock().unwrap().insert(i);
            black_box(mx.lock().unwrap().get(k).copied());
            black_box(mx.lock().unwrap().try_remove(k));
        });
        // raw contention calibration: shared fetch_add
        let a = std::sync::atomic::AtomicU64::new(0);
        two("shared_fetch_add", n * 3, threads, |_| {
            a.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        });
    }
}
