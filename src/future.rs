//! Awaiting the engine from async code: [`Engine::wait_var_async`],
//! [`Engine::wait_to_write_async`], [`Engine::wait_all_async`], and the
//! data accessors [`Data::read_async`](crate::Data::read_async) and
//! [`Data::write_async`](crate::Data::write_async).
//!
//! The futures need nothing but [`std::task::Waker`]: any executor drives
//! them. A wait on a variable pushes a marker operation when it is created,
//! so it follows exactly the operations pushed before that call; the marker
//! answers a pooled wait slot and wakes the task's waker, from the thread
//! that completed the last operation it waited for. Waiting for everything
//! registers the slot on a lock-free list that the completion which leaves
//! the engine idle answers. No future polls busily, takes a lock or (once
//! the slot pool has grown to the number of waits in flight) allocates;
//! the waker is cloned once per task that polls it, which is what the
//! executor's waker costs (an atomic increment for tokio's).
//!
//! A future dropped before it is answered takes its waker back at once:
//! nothing of the task stays registered. Its marker, already queued, still
//! runs in its turn and answers nobody; an access the marker had handed
//! over meanwhile is given back at once.
//!
//! On an engine whose operations only waiting threads run (the seeded
//! shuffle mode with no worker threads), polling runs the ready
//! operations, and a future still waiting after that asks to be polled
//! again.

use crate::base::error::EngineError;
use crate::core::wait::Granted;
use crate::core::Core;
use crate::engine::Engine;
use crate::graph::var::Var;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

/// Where a wait on a variable stands.
enum Step {
    /// Answered without a marker (or the push failed).
    Answered(Result<(), EngineError>),
    /// Waiting on this wait slot.
    Slot(u32),
    /// Returned.
    Over,
}

/// Where a wait for the whole engine stands.
enum AllStep {
    /// Flushing the caller's bulk failed.
    Refused(EngineError),
    /// Not registered: look whether the engine is idle.
    Look,
    /// Waiting on this wait slot for an idle moment.
    Slot(u32),
    /// Returned.
    Over,
}

/// The future of [`Engine::wait_var_async`] and
/// [`Engine::wait_to_write_async`]: resolves once every operation pushed
/// before the call that the wait must follow has finished, with the failure
/// the variable's value holds then, as the blocking waits do.
#[must_use = "a future does nothing unless awaited"]
pub struct VarWait<'a> {
    core: &'a Core,
    var: Var,
    write: bool,
    step: Step,
}

impl Engine {
    /// [`wait_var`](Self::wait_var) as a future (module docs of
    /// [`future`](crate::future)): resolves once every write pushed on
    /// `var` before this call has finished.
    ///
    /// ```
    /// # let engine = depengine::Engine::builder().build().unwrap();
    /// let v = engine.new_var();
    /// engine.push_sync(|_| std::thread::sleep(std::time::Duration::from_millis(5)), &[], &[v]).unwrap();
    /// let ready = engine.wait_var_async(v);
    /// // ... in an async fn: `ready.await?` (here, any executor's block_on)
    /// # depengine::future::block_on(ready).unwrap();
    /// assert_eq!(engine.var_version(v).unwrap(), 1);
    /// ```
    pub fn wait_var_async(&self, var: Var) -> VarWait<'_> {
        VarWait::new(self.core(), var, false)
    }

    /// [`wait_to_write`](Self::wait_to_write) as a future: resolves once
    /// every operation pushed on `var` before this call has finished.
    pub fn wait_to_write_async(&self, var: Var) -> VarWait<'_> {
        VarWait::new(self.core(), var, true)
    }

    /// [`wait_all`](Self::wait_all) as a future: resolves once the engine
    /// is idle (everything pushed, before or since, has finished), with
    /// the first failure recorded since the previous `wait_all`.
    pub fn wait_all_async(&self) -> AllWait<'_> {
        let flushed = self.core().flush_bulk();
        AllWait { core: self.core(), step: flushed.map_or_else(AllStep::Refused, |()| AllStep::Look) }
    }
}

impl<'a> VarWait<'a> {
    fn new(core: &'a Core, var: Var, write: bool) -> Self {
        let step = match core.wait_var_now(var, write) {
            Some(answer) => Step::Answered(answer),
            None => match core.push_marker(var, write, false) {
                Ok(ws) => {
                    core.observe.stats.waited();
                    Step::Slot(ws)
                }
                Err(e) => Step::Answered(Err(e)),
            },
        };
        VarWait { core, var, write, step }
    }
}

impl Future for VarWait<'_> {
    type Output = Result<(), EngineError>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let me = self.get_mut();
        if let Step::Slot(ws) = me.step {
            if !me.core.poll_slot(ws, cx.waker()) {
                return Poll::Pending;
            }
            let (error, _) = me.core.waits.get(ws).take();
            me.core.let_go(ws);
            me.step = Step::Over;
            return Poll::Ready(me.core.wait_answer(me.var, me.write, error));
        }
        match std::mem::replace(&mut me.step, Step::Over) {
            Step::Answered(answer) => Poll::Ready(answer),
            _ => panic!("VarWait polled after it returned"),
        }
    }
}

impl Drop for VarWait<'_> {
    fn drop(&mut self) {
        if let Step::Slot(ws) = self.step {
            self.core.cancel_wait(ws);
        }
    }
}

/// The future of [`Engine::wait_all_async`].
#[must_use = "a future does nothing unless awaited"]
pub struct AllWait<'a> {
    core: &'a Core,
    step: AllStep,
}

impl Future for AllWait<'_> {
    type Output = Result<(), EngineError>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let me = self.get_mut();
        loop {
            match me.step {
                AllStep::Look => {
                    if me.core.is_idle() {
                        me.step = AllStep::Over;
                        return Poll::Ready(me.core.wait_all_answer());
                    }
                    me.step = AllStep::Slot(me.core.wait_idle());
                }
                AllStep::Slot(ws) => {
                    if !me.core.poll_slot(ws, cx.waker()) {
                        return Poll::Pending;
                    }
                    // Answered at an idle moment; more may have come since
                    // (the loop looks again).
                    me.core.end_wait_idle(ws, false);
                    me.step = AllStep::Look;
                }
                AllStep::Refused(_) => {
                    let AllStep::Refused(e) = std::mem::replace(&mut me.step, AllStep::Over) else { unreachable!() };
                    return Poll::Ready(Err(e));
                }
                AllStep::Over => panic!("AllWait polled after it returned"),
            }
        }
    }
}

impl Drop for AllWait<'_> {
    fn drop(&mut self) {
        if let AllStep::Slot(ws) = self.step {
            self.core.end_wait_idle(ws, true);
        }
    }
}

/// A data guard's access as a future: resolves to the variable's failure
/// and the completion that ends the access ([`Data::read_async`] and
/// [`Data::write_async`] build on it).
///
/// [`Data::read_async`]: crate::Data::read_async
/// [`Data::write_async`]: crate::Data::write_async
pub(crate) struct HoldWait<'a> {
    core: &'a Core,
    var: Var,
    write: bool,
    step: Result<u32, Option<EngineError>>,
}

impl<'a> HoldWait<'a> {
    pub(crate) fn new(core: &'a Core, var: Var, write: bool) -> Self {
        HoldWait { core, var, write, step: core.push_marker(var, write, true).map_err(Some) }
    }

    pub(crate) fn poll_hold(&mut self, cx: &mut Context<'_>) -> Poll<Result<Granted, EngineError>> {
        let ws = match &mut self.step {
            Ok(ws) => *ws,
            Err(e) => return Poll::Ready(Err(e.take().expect("polled after it returned"))),
        };
        if !self.core.poll_slot(ws, cx.waker()) {
            return Poll::Pending;
        }
        self.step = Err(None);
        Poll::Ready(self.core.take_hold(ws, self.var, self.write))
    }
}

impl Drop for HoldWait<'_> {
    fn drop(&mut self) {
        if let Ok(ws) = self.step {
            self.core.cancel_wait(ws);
        }
    }
}

/// Runs `future` to completion on this thread, parking it while the future
/// waits: the smallest executor, for tests, examples and synchronous code
/// that holds a future of this crate.
///
/// ```
/// let engine = depengine::Engine::builder().build().unwrap();
/// let v = engine.new_var();
/// engine.push_sync(|_| {}, &[], &[v]).unwrap();
/// depengine::future::block_on(engine.wait_var_async(v)).unwrap();
/// ```
pub fn block_on<F: Future>(future: F) -> F::Output {
    struct Unpark(std::thread::Thread);
    impl std::task::Wake for Unpark {
        fn wake(self: Arc<Self>) {
            self.0.unpark();
        }
        fn wake_by_ref(self: &Arc<Self>) {
            self.0.unpark();
        }
    }
    let waker = std::task::Waker::from(Arc::new(Unpark(std::thread::current())));
    let mut cx = Context::from_waker(&waker);
    let mut future = std::pin::pin!(future);
    loop {
        if let Poll::Ready(out) = future.as_mut().poll(&mut cx) {
            return out;
        }
        std::thread::park();
    }
}
