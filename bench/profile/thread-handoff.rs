//! What a mirrored log commit paid per cycle for its second leg before `crates/slog/src/leg_io.rs`:
//! a scoped thread created and joined, against a round trip to a thread that waits on a condition
//! variable (docs/design/0004, "a mirror's thread per commit"). Not part of the workspace:
//!
//!     rustc -O bench/profile/thread-handoff.rs -o /tmp/thread-handoff && /tmp/thread-handoff
use std::sync::{Arc, Condvar, Mutex};
use std::time::Instant;

const ROUNDS: u32 = 5000;

fn main() {
    let t0 = Instant::now();
    for _ in 0..ROUNDS {
        std::thread::scope(|s| {
            let h = s.spawn(|| 1u64);
            std::hint::black_box(h.join().unwrap());
        });
    }
    println!("scoped spawn + join: {:.1} us", t0.elapsed().as_secs_f64() * 1e6 / f64::from(ROUNDS));
    // (sent, done): the waiting thread answers each job by catching `done` up with `sent`.
    let pair = Arc::new((Mutex::new((0u64, 0u64)), Condvar::new()));
    let worker = Arc::clone(&pair);
    std::thread::spawn(move || {
        let (m, c) = &*worker;
        let mut g = m.lock().unwrap();
        loop {
            while g.0 == g.1 {
                g = c.wait(g).unwrap();
            }
            g.1 = g.0;
            c.notify_all();
        }
    });
    let (m, c) = &*pair;
    let t0 = Instant::now();
    for _ in 0..ROUNDS {
        let mut g = m.lock().unwrap();
        g.0 += 1;
        c.notify_all();
        while g.1 != g.0 {
            g = c.wait(g).unwrap();
        }
    }
    println!("hand-off to a waiting thread and back: {:.1} us", t0.elapsed().as_secs_f64() * 1e6 / f64::from(ROUNDS));
}
