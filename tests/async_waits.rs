//! The futures: waits and data access awaited under tokio and under a
//! minimal executor that counts polls, with cancellation, many waiters on
//! one variable, failing operations, and typed asynchronous operations.

use depengine::{Data, Engine, EngineError, EngineKind, FnProperty};
use std::future::Future;
use std::pin::pin;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll, Wake, Waker};
use std::time::Duration;

/// A waker that counts its wake-ups and unparks the polling thread; its
/// strong count says whether anybody still holds a clone.
struct Counting {
    wakes: AtomicUsize,
    thread: std::thread::Thread,
}

impl Wake for Counting {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }
    fn wake_by_ref(self: &Arc<Self>) {
        self.wakes.fetch_add(1, Ordering::SeqCst);
        self.thread.unpark();
    }
}

fn counting() -> (Arc<Counting>, Waker) {
    let c = Arc::new(Counting { wakes: AtomicUsize::new(0), thread: std::thread::current() });
    (c.clone(), Waker::from(c))
}

/// The minimal executor: polls, parks until woken, polls again; returns
/// the output and the number of polls.
/// A pending future must be woken: a wake-up lost fails the test (after
/// `LOST`) rather than hanging it.
fn run_counting<F: Future>(future: F) -> (F::Output, usize) {
    const LOST: Duration = Duration::from_secs(20);
    let (counter, waker) = counting();
    let mut cx = Context::from_waker(&waker);
    let mut future = pin!(future);
    let mut polls = 0;
    loop {
        polls += 1;
        let wakes = counter.wakes.load(Ordering::SeqCst);
        if let Poll::Ready(out) = future.as_mut().poll(&mut cx) {
            return (out, polls);
        }
        let start = std::time::Instant::now();
        while counter.wakes.load(Ordering::SeqCst) == wakes {
            assert!(start.elapsed() < LOST, "a pending future was not woken within {LOST:?}");
            std::thread::park_timeout(LOST / 10);
        }
    }
}

/// Runs `f` under tokio's clock: a lost wake-up fails the test rather
/// than hanging it.
async fn within_time<F: Future<Output = ()>>(f: F) {
    tokio::time::timeout(Duration::from_secs(20), f).await.expect("a task was not woken within 20 s");
}

fn engine() -> Engine {
    Engine::builder().kind(EngineKind::Pooled).cpu_workers(2).build().unwrap()
}

/// Opens a gate when dropped: a failing test unwinds instead of hanging
/// in the engine's drop behind a gate never opened.
struct OpenOnDrop(Arc<AtomicBool>);

impl Drop for OpenOnDrop {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Release);
    }
}

/// A gate: an operation on `var` that runs until `open` is set (declare
/// the returned guard after the engine).
#[must_use]
fn hold(engine: &Engine, var: depengine::Var, open: &Arc<AtomicBool>) -> OpenOnDrop {
    let gate = open.clone();
    engine
        .push_sync(
            move |_| {
                while !gate.load(Ordering::Acquire) {
                    std::thread::sleep(Duration::from_micros(100));
                }
            },
            &[],
            &[var],
        )
        .unwrap();
    OpenOnDrop(open.clone())
}

/// A wait resolves after the write pushed before it, and is woken, not
/// polled busily: one poll before the write finishes, one after.
#[test]
fn a_wait_is_woken_once_by_the_write_it_follows() {
    let engine = engine();
    let v = engine.new_var();
    let open = Arc::new(AtomicBool::new(false));
    let _open = hold(&engine, v, &open);
    let opener = {
        let open = open.clone();
        std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(20));
            open.store(true, Ordering::Release);
        })
    };
    let (answer, polls) = run_counting(engine.wait_var_async(v));
    answer.unwrap();
    assert!(open.load(Ordering::Acquire), "resolved before the write it follows finished");
    assert_eq!(engine.var_version(v).unwrap(), 1);
    // Park may return spuriously; a busy poller would take thousands.
    assert!(polls <= 4, "{polls} polls: the future polls busily");
    opener.join().unwrap();
}

/// `wait_to_write_async` also waits for the reads pushed before it.
#[test]
fn wait_to_write_follows_the_reads_too() {
    let engine = engine();
    let v = engine.new_var();
    let open = Arc::new(AtomicBool::new(false));
    let read_done = Arc::new(AtomicBool::new(false));
    {
        let (open, read_done) = (open.clone(), read_done.clone());
        engine
            .push_sync(
                move |_| {
                    while !open.load(Ordering::Acquire) {
                        std::thread::sleep(Duration::from_micros(100));
                    }
                    read_done.store(true, Ordering::Release);
                },
                &[v],
                &[],
            )
            .unwrap();
    }
    // A read-wait does not follow reads: it resolves at once.
    run_counting(engine.wait_var_async(v)).0.unwrap();
    assert!(!read_done.load(Ordering::Acquire));
    let waiter = engine.wait_to_write_async(v);
    open.store(true, Ordering::Release);
    run_counting(waiter).0.unwrap();
    assert!(read_done.load(Ordering::Acquire), "wait_to_write resolved before the read");
}

/// A future dropped while it waits gives its waker back at once, and the
/// engine goes on: nothing stays registered, nothing hangs.
#[test]
fn a_dropped_future_leaves_nothing_registered() {
    let engine = engine();
    let (v, d) = (engine.new_var(), engine.data(0u32));
    let open = Arc::new(AtomicBool::new(false));
    let _open = hold(&engine, v, &open);
    engine.push_data((), &d, |_, (), _| std::thread::sleep(Duration::from_millis(10))).unwrap();
    let (counter, waker) = counting();
    let mut cx = Context::from_waker(&waker);
    {
        let mut wait = pin!(engine.wait_var_async(v));
        let mut all = pin!(engine.wait_all_async());
        let mut access = pin!(d.write_async());
        assert!(wait.as_mut().poll(&mut cx).is_pending());
        assert!(all.as_mut().poll(&mut cx).is_pending());
        // The write may be granted already; a pending one is dropped unused.
        let _ = access.as_mut().poll(&mut cx);
        assert!(Arc::strong_count(&counter) > 2, "the futures keep clones of the waker");
    }
    assert_eq!(Arc::strong_count(&counter), 2, "a dropped future kept its waker");
    open.store(true, Ordering::Release);
    engine.wait_all().unwrap();
    // The dropped access gave the data back: later access works.
    *d.write().unwrap() = 7;
    assert_eq!(*d.read().unwrap(), 7);
    assert_eq!(counter.wakes.load(Ordering::SeqCst), 0, "a dropped future was woken");
    assert_eq!(engine.pool_stats().live_ops, 0);
}

/// Many tasks await one variable at once under tokio; each is woken by the
/// write it follows and sees its value.
#[test]
fn many_tokio_tasks_await_one_variable() {
    let engine = Arc::new(engine());
    let x = Arc::new(engine.data(0u64));
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    rt.block_on(within_time(async {
        let mut tasks = Vec::new();
        for i in 1..=200u64 {
            engine.push_data((), &*x, move |_, (), x| *x += i).unwrap();
            let (x, want) = (x.clone(), i * (i + 1) / 2);
            let engine = engine.clone();
            tasks.push(tokio::spawn(async move {
                // Pushed after the i-th write: sees at least its sum.
                let wait = engine.wait_var_async(depengine_var(&x));
                wait.await.unwrap();
                let seen = *x.read_async().await.unwrap();
                assert!(seen >= want, "task {i} saw {seen} < {want}");
            }));
        }
        for t in tasks {
            t.await.unwrap();
        }
    }));
    assert_eq!(*x.read().unwrap(), 200 * 201 / 2);
}

/// A typed datum's variable, for the untyped waits.
fn depengine_var<T: Send + 'static>(d: &Data<T>) -> depengine::Var {
    d.var()
}

/// A waiter whose operation failed gets the failure, with the operation's
/// name and message; `wait_all_async` reports it once.
#[test]
fn a_waiter_gets_the_failure_of_its_operation() {
    let engine = engine();
    let x = engine.data(1u32);
    let opts = depengine::PushOpts::new().name("breaks x");
    engine.push_data_with((), &x, opts, |_, (), _| Err::<(), _>("no luck")).unwrap();
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    rt.block_on(within_time(async {
        let Err(EngineError::OpFailed(e)) = engine.wait_var_async(x.var()).await else { panic!("no failure") };
        assert_eq!((e.op_name(), e.message()), ("breaks x", "no luck"));
        let Err(EngineError::OpFailed(e)) = x.read_async().await.map(|_| ()) else { panic!("no failure") };
        assert_eq!(e.op_name(), "breaks x");
        assert!(matches!(engine.wait_all_async().await, Err(EngineError::OpFailed(_))));
        engine.wait_all_async().await.unwrap();
        // A write heals it.
        *x.write_async().await.unwrap() = 2;
        assert_eq!(*x.read_async().await.unwrap(), 2);
    }));
}

/// `wait_all_async` resolves only when everything pushed has finished,
/// including what is pushed while it waits.
#[test]
fn wait_all_follows_everything_pushed() {
    let engine = engine();
    let done = Arc::new(AtomicUsize::new(0));
    for _ in 0..50 {
        let done = done.clone();
        engine
            .push_sync(
                move |_| {
                    std::thread::sleep(Duration::from_micros(200));
                    done.fetch_add(1, Ordering::SeqCst);
                },
                &[],
                &[],
            )
            .unwrap();
    }
    let (answer, _) = run_counting(engine.wait_all_async());
    answer.unwrap();
    assert_eq!(done.load(Ordering::SeqCst), 50);
}

/// A write guard from `write_async` holds later operations back until it
/// is dropped, and earlier ones finish before it is granted.
#[test]
fn an_async_write_guard_holds_the_data() {
    let engine = engine();
    let x = engine.data(Vec::<u32>::new());
    engine.push_data((), &x, |_, (), x| x.push(1)).unwrap();
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    rt.block_on(within_time(async {
        let mut guard = x.write_async().await.unwrap();
        assert_eq!(*guard, [1], "an earlier write had not finished");
        engine.push_data((), &x, |_, (), x| x.push(3)).unwrap();
        tokio::time::sleep(Duration::from_millis(10)).await;
        guard.push(2);
        drop(guard);
        engine.wait_all_async().await.unwrap();
    }));
    assert_eq!(*x.read().unwrap(), [1, 2, 3]);
}

/// An asynchronous typed operation finished on another thread: the data
/// stay held until its access is signalled; a dropped access fails it.
#[test]
fn a_typed_async_operation_holds_its_data_until_signalled() {
    let engine = engine();
    let (a, b) = (engine.data(5u32), engine.data(0u32));
    engine
        .push_data_async(&a, &b, |_, mut access| {
            std::thread::spawn(move || {
                std::thread::sleep(Duration::from_millis(10));
                let (a, b) = access.get();
                *b = *a * 2;
                access.signal();
            });
        })
        .unwrap();
    engine.push_data((), &b, |_, (), b| *b += 1).unwrap();
    assert_eq!(*b.read().unwrap(), 11);
    engine.push_data_async((), &b, |_, access| drop(access)).unwrap();
    assert!(matches!(b.read(), Err(EngineError::OpFailed(_))));
    engine.wait_all().ok();
}

/// A typed prebuilt operator runs on its data at every push, and keeps
/// them alive until it is deleted.
#[test]
fn a_typed_operator_keeps_its_data() {
    let engine = engine();
    let (step, total) = (engine.data(2u64), engine.data(0u64));
    let op = engine.new_data_operator(&step, &total, FnProperty::Normal, "add", |_, s, t| *t += *s).unwrap();
    drop(step);
    for _ in 0..10 {
        engine.push_op(&op, depengine::Context::cpu(), 0).unwrap();
    }
    engine.delete_operator(op);
    assert_eq!(*total.read().unwrap(), 20);
    engine.wait_all().unwrap();
    assert_eq!(engine.pool_stats().live_vars, 1, "the operator's data was not deleted with it");
}

/// On the seeded shuffle mode with no workers, polling runs the work.
#[test]
fn futures_drive_an_engine_without_workers() {
    let engine = Engine::builder().shuffle_seed(7).shuffle_workers(0).build().unwrap();
    let x = engine.data(0u32);
    for _ in 0..10 {
        engine.push_data((), &x, |_, (), x| *x += 1).unwrap();
    }
    depengine::future::block_on(engine.wait_all_async()).unwrap();
    assert_eq!(*depengine::future::block_on(x.read_async()).unwrap(), 10);
}

/// Guards and their futures racing the engine's shutdown: each gets its
/// access or an error, never a panic or a hang (a marker rejected at
/// dispatch hands over no access).
#[test]
fn accesses_racing_a_shutdown_get_an_answer() {
    for round in 0..100u64 {
        let engine = Arc::new(engine());
        let x = Arc::new(engine.data(0u64));
        let reader = {
            let x = x.clone();
            std::thread::spawn(move || {
                for i in 0.. {
                    let answer = match i % 3 {
                        0 => x.read().map(|g| *g),
                        1 => x.write().map(|mut g| {
                            *g += 1;
                            *g
                        }),
                        _ => depengine::future::block_on(x.read_async()).map(|g| *g),
                    };
                    if let Err(e) = answer {
                        assert!(matches!(e, EngineError::ShutDown), "{e:?}");
                        return i;
                    }
                }
                unreachable!()
            })
        };
        std::thread::sleep(Duration::from_micros(50 * (round % 10)));
        engine.shutdown().unwrap();
        reader.join().unwrap();
    }
}
