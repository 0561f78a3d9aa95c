//! Bounded memory (SPEC §3): a pusher racing ahead of the workers is held
//! near the pending-operation cap, and the cap never deadlocks a program that
//! keeps completions outstanding on purpose.

use depengine::{Completion, Engine, EngineKind};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

const CAP: u64 = 1_000;

#[test]
fn a_racing_pusher_stays_near_the_cap() {
    for kind in [EngineKind::Pooled, EngineKind::PerDevice] {
        let engine = Engine::builder().kind(kind).cpu_workers(2).max_pending(CAP).build().unwrap();
        let v = engine.new_var();
        let mut highest = 0;
        for _ in 0..50_000 {
            engine.push_sync(|_| (0..50).for_each(|_| std::hint::spin_loop()), &[], &[v]).unwrap();
            highest = highest.max(engine.pending());
        }
        engine.wait_all().unwrap();
        assert!(highest <= 4 * CAP, "{kind:?}: pending reached {highest} with a cap of {CAP}");
        assert!(engine.pool_stats().op_blocks_created as u64 <= 8 * CAP, "{kind:?}: {:?}", engine.pool_stats());
    }
}

#[test]
fn held_completions_do_not_deadlock_the_cap() {
    for kind in EngineKind::ALL {
        let engine = Engine::builder().kind(kind).cpu_workers(2).max_pending(CAP).build().unwrap();
        let held: Arc<Mutex<Vec<Completion>>> = Arc::default();
        for _ in 0..3 * CAP {
            let h = held.clone();
            engine.push_async(move |_, done| h.lock().unwrap().push(done), &[], &[]).unwrap();
        }
        assert_eq!(engine.pending(), 3 * CAP, "{kind:?}: every push returned with its completion held");
        // Only now does anyone signal: another thread, for as long as bodies
        // that ran late (the random-order engine runs them inside the wait)
        // hand it completions.
        let done = Arc::new(AtomicBool::new(false));
        let signaller = {
            let (held, done) = (held.clone(), done.clone());
            std::thread::spawn(move || {
                while !done.load(Ordering::Acquire) {
                    let batch = std::mem::take(&mut *held.lock().unwrap());
                    batch.into_iter().for_each(Completion::signal);
                    std::thread::yield_now();
                }
            })
        };
        engine.wait_all().unwrap();
        done.store(true, Ordering::Release);
        signaller.join().unwrap();
        assert_eq!(engine.pending(), 0, "{kind:?}");
    }
}
