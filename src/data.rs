//! Typed data: values that operations share through the engine, with the
//! scheduling rule enforced by the types.
//!
//! A [`Data<T>`] owns a value of type `T` and the variable that guards it.
//! An operation names the data it reads and the data it writes
//! ([`Engine::push_data`]); its body receives `&T` for each read and
//! `&mut T` for each write, and can reach no other data: a handle gives no
//! access to its value outside an operation or a guard
//! ([`Data::read`], [`Data::write`]).
//!
//! # Why it is sound
//!
//! The engine runs an operation only when its variables grant it: a write
//! alone, reads together, in push order. While a body runs, no other
//! operation holds a write of the data it reads, nor any access to the data
//! it writes; so its `&T` are never aliased by a `&mut T`, and its `&mut T`
//! by nothing. And everything an operation did happens-before every later
//! operation that conflicts with it (the crate docs' memory guarantee): a
//! body sees its predecessors' writes, with no further synchronization.
//! Two references to one value inside one operation are refused at push
//! time ([`EngineError::AliasedData`]). Reads hand `&T` to several threads
//! at once, so they need `T: Sync`; writes hand `&mut T` to another thread,
//! so data needs `T: Send`.
//!
//! # Lifetime
//!
//! The value lives in its own heap block, created by [`Engine::data`].
//! Operations hold raw pointers to it, not reference counts, so a typed
//! push costs what an untyped one does. When the last handle is dropped the
//! variable is deleted; the deletion runs after every operation pushed on
//! it, and drops the value then. A handle dropped after its engine began
//! shutting down leaves the value to the engine, which drops it once its
//! threads are gone.

use crate::base::context::{FnProperty, PushOpts, RunContext};
use crate::base::error::{EngineError, OpOutput};
use crate::core::Core;
use crate::engine::Engine;
use crate::graph::var::Var;
use crate::mem::completion::Completion;
use std::cell::UnsafeCell;
use std::marker::PhantomData;
use std::ptr::NonNull;
use std::sync::{Arc, Condvar, Mutex};

/// A value of type `T` shared by operations through the engine (module
/// docs). Cloning a handle is cheap (a reference count); the value is
/// dropped once the last handle is gone and every operation on it has run.
///
/// ```
/// let engine = depengine::Engine::builder().build().unwrap();
/// let a = engine.data(vec![1.0f32, 2.0, 3.0]);
/// let sum = engine.data(0.0f32);
/// engine.push_data(&a, &sum, |_, a, sum| *sum = a.iter().sum()).unwrap();
/// assert_eq!(*sum.read().unwrap(), 6.0);
/// ```
pub struct Data<T: Send + 'static> {
    shared: Arc<Shared<T>>,
}

/// What every handle of one value shares.
struct Shared<T: Send + 'static> {
    core: Arc<Core>,
    var: Var,
    value: Value<T>,
}

/// The value's heap block, as operations and guards reach it.
#[doc(hidden)]
pub struct Value<T>(NonNull<UnsafeCell<T>>);

impl<T> Clone for Value<T> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<T> Copy for Value<T> {}

impl<T> Value<T> {
    /// The block as the `Box` it was made from.
    ///
    /// # Safety
    /// Once, after every access to the value has ended.
    unsafe fn into_box(self) -> Box<UnsafeCell<T>> {
        // SAFETY: made by `Box::new` in `Engine::data` (the caller's
        // contract covers the rest).
        unsafe { Box::from_raw(self.0.as_ptr()) }
    }

    /// The value.
    ///
    /// # Safety
    /// The caller holds an access that allows the use it makes of it.
    unsafe fn get(self) -> *mut T {
        // SAFETY: the block lives until `into_box` (the caller's contract).
        unsafe { self.0.as_ref().get() }
    }
}

// SAFETY: the block is reached only under the engine's ordering (module
// docs): `&mut T` by one thread at a time, which needs `T: Send`; `&T` by
// several, for which the push requires `T: Sync`.
unsafe impl<T: Send + 'static> Send for Value<T> {}
// SAFETY: as above; sharing the pointer gives no access by itself.
unsafe impl<T: Send + 'static> Sync for Value<T> {}

impl<T: Send + 'static> Clone for Data<T> {
    fn clone(&self) -> Self {
        Data { shared: self.shared.clone() }
    }
}

impl<T: Send + 'static> std::fmt::Debug for Data<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Data").field("var", &self.shared.var).finish()
    }
}

impl<T: Send + 'static> Drop for Shared<T> {
    fn drop(&mut self) {
        let value = self.value;
        // Dropped by the deletion, which runs after every operation pushed
        // on the variable (no handle is left to push more).
        let drop_value = move || {
            // SAFETY: the deletion holds the variable's last access: no
            // operation reaches the block any more.
            drop(unsafe { value.into_box() });
        };
        if crate::engine::delete_var_on(&self.core, self.var, drop_value).is_err() {
            // Shutting down: operations dispatched before the close may still
            // run on it. The engine drops it once its threads are gone.
            self.core.life.bury(Box::new(Buried(value)));
        }
    }
}

/// A value left to the engine ([`Shared`]'s drop).
struct Buried<T>(Value<T>);

impl<T> Drop for Buried<T> {
    fn drop(&mut self) {
        // SAFETY: buried values are dropped with the core, when no thread
        // of the engine runs any more.
        drop(unsafe { self.0.into_box() });
    }
}

impl Engine {
    /// Makes `value` typed data of this engine (module docs).
    pub fn data<T: Send + 'static>(&self, value: T) -> Data<T> {
        let core = self.core().clone();
        let var = core.vars.new_var(&core.blocks);
        let value = Value(NonNull::from(Box::leak(Box::new(UnsafeCell::new(value)))));
        Data { shared: Arc::new(Shared { core, var, value }) }
    }

    /// Pushes an operation that reads `reads` and writes `writes` (each a
    /// `&Data<T>`, a tuple of them up to eight, or `()`), with default
    /// options. Its body receives `&T` for each read and `&mut T` for each
    /// write, in the same shape; it may return `()` or a `Result`.
    ///
    /// ```
    /// let engine = depengine::Engine::builder().build().unwrap();
    /// let (x, y) = (engine.data(2u64), engine.data(String::new()));
    /// let out = engine.data(Vec::new());
    /// engine.push_data((&x, &y), &out, |_, (x, y), out| out.push(format!("{x}{y}"))).unwrap();
    /// engine.push_data((), (&x, &y), |_, (), (x, y)| { *x += 1; y.push('!') }).unwrap();
    /// assert_eq!(*out.read().unwrap(), ["2"]);
    /// assert_eq!((*x.read().unwrap(), y.read().unwrap().as_str()), (3, "!"));
    /// ```
    ///
    /// A body cannot write what it declared as read:
    ///
    /// ```compile_fail
    /// let engine = depengine::Engine::builder().build().unwrap();
    /// let (x, y) = (engine.data(1u32), engine.data(0u32));
    /// engine.push_data(&x, &y, |_, x, y| { *x += 1; *y = *x }).unwrap();
    /// ```
    ///
    /// nor reach data it did not declare (a handle has no access of its own):
    ///
    /// ```compile_fail
    /// let engine = depengine::Engine::builder().build().unwrap();
    /// let (x, y) = (engine.data(1u32), engine.data(0u32));
    /// let x2 = x.clone();
    /// engine.push_data((), &y, move |_, (), y| *y = *x2).unwrap();
    /// ```
    ///
    /// and data must be `Send` (a value another thread's body uses):
    ///
    /// ```compile_fail
    /// let engine = depengine::Engine::builder().build().unwrap();
    /// let x = engine.data(std::rc::Rc::new(1));
    /// ```
    pub fn push_data<R, W, F, O>(&self, reads: R, writes: W, body: F) -> Result<(), EngineError>
    where
        R: Reads,
        W: Writes,
        F: for<'a> FnOnce(&RunContext, R::Refs<'a>, W::Muts<'a>) -> O + Send + 'static,
        O: OpOutput,
    {
        self.push_data_with(reads, writes, PushOpts::new(), body)
    }

    /// [`push_data`](Self::push_data) with explicit options.
    pub fn push_data_with<R, W, F, O>(&self, reads: R, writes: W, opts: PushOpts, body: F) -> Result<(), EngineError>
    where
        R: Reads,
        W: Writes,
        F: for<'a> FnOnce(&RunContext, R::Refs<'a>, W::Muts<'a>) -> O + Send + 'static,
        O: OpOutput,
    {
        let (read_vars, write_vars) = (reads.vars(), writes.vars());
        let (read_vars, write_vars) = (read_vars.as_ref(), write_vars.as_ref());
        if let Err(e) = check_aliasing(read_vars, write_vars) {
            self.core().drop_user_value(body);
            return Err(e);
        }
        let (r, w) = (reads.raw(), writes.raw());
        // SAFETY: the engine runs this body only while it holds these
        // accesses, with no two references to one value (checked above),
        // and the values outlive every operation pushed on them (module docs).
        let run = move |ctx: &RunContext| body(ctx, unsafe { R::refs(r) }, unsafe { W::muts(w) });
        self.push_sync_with(run, read_vars, write_vars, opts)
    }
}

/// Refuses two references to one value in one operation: the same data
/// twice among the writes, or among the reads and the writes.
fn check_aliasing(reads: &[Var], writes: &[Var]) -> Result<(), EngineError> {
    for (i, w) in writes.iter().enumerate() {
        if writes[..i].contains(w) || reads.contains(w) {
            return Err(EngineError::AliasedData);
        }
    }
    Ok(())
}

mod sealed {
    use super::{Data, Value, Var};

    /// What both sides of a typed push have in common: the values as the
    /// operation holds them, and their variables. Implemented here only.
    pub trait Side {
        /// The values' blocks, as the operation keeps them.
        type Raw: Copy + Send + 'static;
        /// The variables, one per datum (an array of exactly that many).
        type Vars: AsRef<[Var]>;
        fn raw(&self) -> Self::Raw;
        fn vars(&self) -> Self::Vars;
    }

    impl Side for () {
        type Raw = ();
        type Vars = [Var; 0];
        fn raw(&self) {}
        fn vars(&self) -> [Var; 0] {
            []
        }
    }

    impl<T: Send + 'static> Side for &Data<T> {
        type Raw = Value<T>;
        type Vars = [Var; 1];
        fn raw(&self) -> Value<T> {
            self.shared.value
        }
        fn vars(&self) -> [Var; 1] {
            [self.shared.var]
        }
    }

    macro_rules! sides {
        ($n:literal: $($t:ident $i:tt),+) => {
            impl<$($t: Send + 'static),+> sealed::Side for ($(&Data<$t>,)+) {
                type Raw = ($(Value<$t>,)+);
                type Vars = [Var; $n];
                fn raw(&self) -> Self::Raw {
                    ($(self.$i.shared.value,)+)
                }
                fn vars(&self) -> [Var; $n] {
                    [$(self.$i.shared.var,)+]
                }
            }
        };
    }
    pub(super) use sides;
}

/// The data an operation reads: `()`, a `&Data<T>`, or a tuple of up to
/// eight; its body receives `&T` in the same shape.
pub trait Reads: sealed::Side {
    /// The references the body receives.
    type Refs<'a>;
    /// # Safety
    /// The caller holds a read of each variable, and the values are alive.
    #[doc(hidden)]
    unsafe fn refs<'a>(raw: Self::Raw) -> Self::Refs<'a>;
}

/// The data an operation writes: `()`, a `&Data<T>`, or a tuple of up to
/// eight; its body receives `&mut T` in the same shape.
pub trait Writes: sealed::Side {
    /// The references the body receives.
    type Muts<'a>;
    /// # Safety
    /// The caller holds a write of each variable (none twice), and the
    /// values are alive.
    #[doc(hidden)]
    unsafe fn muts<'a>(raw: Self::Raw) -> Self::Muts<'a>;
}

impl Reads for () {
    type Refs<'a> = ();
    unsafe fn refs<'a>(_raw: ()) -> Self::Refs<'a> {}
}

impl Writes for () {
    type Muts<'a> = ();
    unsafe fn muts<'a>(_raw: ()) -> Self::Muts<'a> {}
}

impl<T: Send + Sync + 'static> Reads for &Data<T> {
    type Refs<'a> = &'a T;
    unsafe fn refs<'a>(raw: Value<T>) -> &'a T {
        // SAFETY: the caller's contract: a granted read, a live value.
        unsafe { &*raw.get() }
    }
}

impl<T: Send + 'static> Writes for &Data<T> {
    type Muts<'a> = &'a mut T;
    unsafe fn muts<'a>(raw: Value<T>) -> &'a mut T {
        // SAFETY: the caller's contract: a granted write, once, a live value.
        unsafe { &mut *raw.get() }
    }
}

macro_rules! tuples {
    ($n:literal: $($t:ident $i:tt),+) => {
        sealed::sides!($n: $($t $i),+);

        impl<$($t: Send + Sync + 'static),+> Reads for ($(&Data<$t>,)+) {
            type Refs<'a> = ($(&'a $t,)+);
            unsafe fn refs<'a>(raw: Self::Raw) -> Self::Refs<'a> {
                // SAFETY: the caller's contract, for each.
                ($(unsafe { &*raw.$i.get() },)+)
            }
        }

        impl<$($t: Send + 'static),+> Writes for ($(&Data<$t>,)+) {
            type Muts<'a> = ($(&'a mut $t,)+);
            unsafe fn muts<'a>(raw: Self::Raw) -> Self::Muts<'a> {
                // SAFETY: the caller's contract, for each (no value twice:
                // the push checked).
                ($(unsafe { &mut *raw.$i.get() },)+)
            }
        }
    };
}

tuples!(1: A 0);
tuples!(2: A 0, B 1);
tuples!(3: A 0, B 1, C 2);
tuples!(4: A 0, B 1, C 2, D 3);
tuples!(5: A 0, B 1, C 2, D 3, E 4);
tuples!(6: A 0, B 1, C 2, D 3, E 4, F 5);
tuples!(7: A 0, B 1, C 2, D 3, E 4, F 5, G 6);
tuples!(8: A 0, B 1, C 2, D 3, E 4, F 5, G 6, H 7);

// ----- access from outside the engine --------------------------------------

/// Where an access operation hands its completion to the waiting thread.
#[derive(Default)]
struct Handoff {
    completion: Mutex<Option<Completion>>,
    ready: Condvar,
}

impl<T: Send + 'static> Data<T> {
    /// Waits until every operation pushed so far that writes this data has
    /// finished, then gives shared access to the value: while the guard
    /// lives, the engine holds a read of it (later writes wait; reads run).
    /// Reports the failure the value holds (the operation that last wrote
    /// it failed, or was skipped).
    ///
    /// Inside a body of the same engine, a guard on data that body holds
    /// is refused ([`EngineError::WaitWouldDeadlock`]); on other data it
    /// waits like [`Engine::wait_var`], and deadlocks if what it waits for
    /// is queued behind this body.
    pub fn read(&self) -> Result<ReadGuard<'_, T>, EngineError>
    where
        T: Sync,
    {
        let done = self.acquire(false)?;
        // SAFETY: the access operation holds a read of the variable until
        // `done` is signalled, so no write can run meanwhile.
        let error = unsafe { self.shared.core.vars.get(self.shared.var.slot).error() };
        if let Some(e) = error {
            done.signal();
            return Err(EngineError::OpFailed(e));
        }
        Ok(ReadGuard { data: self, _held: Held(Some(done)) })
    }

    /// Waits until every operation pushed so far on this data has finished,
    /// then gives exclusive access to the value: while the guard lives, the
    /// engine holds a write of it (later operations on it wait). Like an
    /// operation that writes without reading, it does not report an
    /// earlier failure, and clears it when the guard is dropped: read first
    /// to see one.
    pub fn write(&self) -> Result<WriteGuard<'_, T>, EngineError> {
        let done = self.acquire(true)?;
        Ok(WriteGuard { data: self, _held: Held(Some(done)), _not_sync: PhantomData })
    }

    /// Pushes an operation that holds this data's variable (a write if
    /// `write`) until its completion, and waits for that completion.
    fn acquire(&self, write: bool) -> Result<Completion, EngineError> {
        let core = &self.shared.core;
        let var = self.shared.var;
        if core.would_deadlock(Some(var)) {
            return Err(EngineError::WaitWouldDeadlock);
        }
        let handoff = Arc::new(Handoff::default());
        let give = handoff.clone();
        let body = move |_: &RunContext, done: Completion| {
            *give.completion.lock().unwrap_or_else(|p| p.into_inner()) = Some(done);
            give.ready.notify_one();
        };
        let name = if write { "Data::write" } else { "Data::read" };
        // Runs even after a failure, so that the access is granted and the
        // failure reported (`read`).
        let opts = PushOpts::new().name(name).prop(FnProperty::Async).no_skip();
        let (reads, writes) = if write { (&[][..], &[var][..]) } else { (&[var][..], &[][..]) };
        crate::engine::push_async_on(core, body, reads, writes, opts)?;
        let mut slot = handoff.completion.lock().unwrap_or_else(|p| p.into_inner());
        loop {
            if let Some(done) = slot.take() {
                return Ok(done);
            }
            // Engines whose ready work only waiting threads run need this
            // thread's help; the others wake it (or the timeout does).
            drop(slot);
            let helped = core.help_once();
            slot = handoff.completion.lock().unwrap_or_else(|p| p.into_inner());
            if !helped && slot.is_none() {
                slot = handoff
                    .ready
                    .wait_timeout(slot, std::time::Duration::from_millis(1))
                    .unwrap_or_else(|p| p.into_inner())
                    .0;
            }
        }
    }
}

/// Shared access to a [`Data`]'s value ([`Data::read`]); the engine holds
/// a read of it until the guard is dropped.
pub struct ReadGuard<'a, T: Send + 'static> {
    data: &'a Data<T>,
    _held: Held,
}

/// The access a guard holds: the access operation's completion, signalled
/// when the guard is dropped.
struct Held(Option<Completion>);

impl<T: Send + 'static> std::ops::Deref for ReadGuard<'_, T> {
    type Target = T;
    fn deref(&self) -> &T {
        // SAFETY: the guard's access operation holds a read of the variable
        // (no write runs), and the handle keeps the value alive.
        unsafe { &*self.data.shared.value.get() }
    }
}

/// Exclusive access to a [`Data`]'s value ([`Data::write`]); the engine
/// holds a write of it until the guard is dropped.
pub struct WriteGuard<'a, T: Send + 'static> {
    data: &'a Data<T>,
    _held: Held,
    /// `&mut T` through a shared guard must not be shared between threads
    /// unless `T` may be.
    _not_sync: PhantomData<&'a mut T>,
}

impl<T: Send + 'static> std::ops::Deref for WriteGuard<'_, T> {
    type Target = T;
    fn deref(&self) -> &T {
        // SAFETY: the guard's access operation holds the variable's write.
        unsafe { &*self.data.shared.value.get() }
    }
}

impl<T: Send + 'static> std::ops::DerefMut for WriteGuard<'_, T> {
    fn deref_mut(&mut self) -> &mut T {
        // SAFETY: the guard's access operation holds the variable's write,
        // and this guard is borrowed mutably.
        unsafe { &mut *self.data.shared.value.get() }
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        if let Some(done) = self.0.take() {
            done.signal();
        }
    }
}
