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
use crate::base::error::OpError;
use crate::base::error::{EngineError, OpOutput};
use crate::core::wait::Granted;
use crate::core::Core;
use crate::engine::Engine;
use crate::future::HoldWait;
use crate::graph::operator::Operator;
use crate::graph::var::Var;
use crate::mem::completion::Completion;
use std::cell::UnsafeCell;
use std::future::Future;
use std::marker::PhantomData;
use std::pin::Pin;
use std::ptr::NonNull;
use std::sync::Arc;
use std::task::Poll;

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
    /// A missing dependency, the bug that silently gives wrong numbers with
    /// untyped variables, does not compile: here `examples/mlp.rs`'s tile
    /// product with `b` left out of the reads.
    ///
    /// ```compile_fail
    /// # fn product(c: &mut [f32], a: &[f32], b: &[f32]) {}
    /// let engine = depengine::Engine::builder().build().unwrap();
    /// let (a, b, c) = (engine.data(vec![0f32; 16]), engine.data(vec![0f32; 16]), engine.data(vec![0f32; 16]));
    /// let b2 = b.clone();
    /// engine.push_data(&a, &c, move |_, a, c| product(c, a, &b2)).unwrap();
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
        F: for<'a> FnOnce(&RunContext, Refs<'a, R>, Muts<'a, W>) -> O + Send + 'static,
        O: OpOutput,
    {
        self.push_data_with(reads, writes, PushOpts::new(), body)
    }

    /// [`push_data`](Self::push_data) with explicit options.
    pub fn push_data_with<R, W, F, O>(&self, reads: R, writes: W, opts: PushOpts, body: F) -> Result<(), EngineError>
    where
        R: Reads,
        W: Writes,
        F: for<'a> FnOnce(&RunContext, Refs<'a, R>, Muts<'a, W>) -> O + Send + 'static,
        O: OpOutput,
    {
        let (read_vars, write_vars, body) = self.typed_vars(&reads, &writes, body)?;
        let (read_vars, write_vars) = (read_vars.as_ref(), write_vars.as_ref());
        let (r, w) = (reads.raw(), writes.raw());
        // SAFETY: the engine runs this body only while it holds these
        // accesses, with no two references to one value (checked above),
        // and the values outlive every operation pushed on them (module docs).
        let run = move |ctx: &RunContext| body(ctx, unsafe { r.refs() }, unsafe { w.muts() });
        self.push_sync_with(run, read_vars, write_vars, opts)
    }
}

impl Engine {
    /// Pushes an asynchronous operation on typed data: its body receives
    /// an [`Access`] that owns the operation's completion. The access
    /// hands out the references and may be moved to any thread; the data
    /// stays held until it is signalled (or dropped, which fails the
    /// operation, as a dropped [`Completion`] does).
    ///
    /// ```
    /// let engine = depengine::Engine::builder().build().unwrap();
    /// let (x, y) = (engine.data(20u32), engine.data(0u32));
    /// engine
    ///     .push_data_async(&x, &y, |_, mut access| {
    ///         std::thread::spawn(move || {
    ///             let (x, y) = access.get();
    ///             *y = *x + 1;
    ///             access.signal();
    ///         });
    ///     })
    ///     .unwrap();
    /// assert_eq!(*y.read().unwrap(), 21);
    /// ```
    ///
    /// References cannot outlive the access they came from, which ends the
    /// operation:
    ///
    /// ```compile_fail
    /// let engine = depengine::Engine::builder().build().unwrap();
    /// let y = engine.data(0u32);
    /// engine
    ///     .push_data_async((), &y, |_, mut access| {
    ///         let ((), y) = access.get();
    ///         access.signal();
    ///         *y = 1;
    ///     })
    ///     .unwrap();
    /// ```
    pub fn push_data_async<R, W, F>(&self, reads: R, writes: W, body: F) -> Result<(), EngineError>
    where
        R: Reads,
        W: Writes,
        F: FnOnce(&RunContext, Access<R::Raw, W::Raw>) + Send + 'static,
    {
        self.push_data_async_with(reads, writes, PushOpts::new(), body)
    }

    /// [`push_data_async`](Self::push_data_async) with explicit options.
    pub fn push_data_async_with<R, W, F>(&self, reads: R, writes: W, opts: PushOpts, body: F) -> Result<(), EngineError>
    where
        R: Reads,
        W: Writes,
        F: FnOnce(&RunContext, Access<R::Raw, W::Raw>) + Send + 'static,
    {
        let (read_vars, write_vars, body) = self.typed_vars(&reads, &writes, body)?;
        let (read_vars, write_vars) = (read_vars.as_ref(), write_vars.as_ref());
        let (reads, writes) = (reads.raw(), writes.raw());
        let run = move |ctx: &RunContext, done: Completion| body(ctx, Access { reads, writes, done });
        self.push_async_with(run, read_vars, write_vars, opts)
    }
}

impl Engine {
    /// Builds a prebuilt operator ([`Engine::new_operator`]) on typed
    /// data: each [`push_op`](Engine::push_op) runs `body` with the data's
    /// references. The operator keeps its data alive until it is deleted
    /// and its pushes have run.
    ///
    /// ```
    /// let engine = depengine::Engine::builder().build().unwrap();
    /// let (step, total) = (engine.data(3u64), engine.data(0u64));
    /// let op = engine
    ///     .new_data_operator(&step, &total, depengine::FnProperty::Normal, "accumulate", |_, step, total| {
    ///         *total += *step
    ///     })
    ///     .unwrap();
    /// for _ in 0..4 {
    ///     engine.push_op(&op, depengine::Context::cpu(), 0).unwrap();
    /// }
    /// engine.delete_operator(op);
    /// assert_eq!(*total.read().unwrap(), 12);
    /// ```
    pub fn new_data_operator<R, W, F, O>(
        &self,
        reads: R,
        writes: W,
        prop: FnProperty,
        name: &'static str,
        body: F,
    ) -> Result<Operator, EngineError>
    where
        R: Reads,
        W: Writes,
        F: for<'a> Fn(&RunContext, Refs<'a, R>, Muts<'a, W>) -> O + Send + Sync + 'static,
        O: OpOutput,
    {
        let (read_vars, write_vars, body) = self.typed_vars(&reads, &writes, body)?;
        let (read_vars, write_vars) = (read_vars.as_ref(), write_vars.as_ref());
        let (r, w) = (reads.raw(), writes.raw());
        let handles = (reads.owned(), writes.owned());
        let run = move |ctx: &RunContext| {
            let _alive = &handles;
            // SAFETY: as in `push_data_with`; the operator's handles keep
            // the values alive while it can run.
            body(ctx, unsafe { r.refs() }, unsafe { w.muts() })
        };
        self.new_operator(run, read_vars, write_vars, prop, name)
    }
}

/// The data of an asynchronous typed operation
/// ([`Engine::push_data_async`]): owns the operation's [`Completion`], so
/// the references it hands out end when the operation does.
#[must_use = "an Access dropped unsignalled fails its operation"]
pub struct Access<R: ReadRaw, W: WriteRaw> {
    reads: R,
    writes: W,
    done: Completion,
}

impl<R: ReadRaw, W: WriteRaw> Access<R, W> {
    /// `&T` for each datum read and `&mut T` for each datum written, in
    /// the shapes of the push.
    pub fn get(&mut self) -> (R::Refs<'_>, W::Muts<'_>) {
        // SAFETY: the operation holds its accesses until `done` is
        // signalled, which consumes `self`; the references borrow `self`
        // mutably, so none outlives it nor is handed out twice. The push
        // refused aliases; the handles' values outlive their operations.
        unsafe { (self.reads.refs(), self.writes.muts()) }
    }

    /// The operation succeeded; its data are released.
    pub fn signal(self) {
        self.done.signal();
    }

    /// The operation failed with `message` (as [`Completion::fail`]).
    pub fn fail(self, message: impl std::fmt::Display) {
        self.done.fail(message);
    }
}

impl<R: ReadRaw, W: WriteRaw> std::fmt::Debug for Access<R, W> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Access").field("done", &self.done).finish()
    }
}

impl Engine {
    /// The variables of a typed push, checked for aliases
    /// ([`check_aliasing`]); refused, the body is dropped unrun.
    fn typed_vars<R: sealed::Side, W: sealed::Side, B>(
        &self,
        reads: &R,
        writes: &W,
        body: B,
    ) -> Result<(R::Vars, W::Vars, B), EngineError> {
        let (read_vars, write_vars) = (reads.vars(), writes.vars());
        if let Err(e) = check_aliasing(read_vars.as_ref(), write_vars.as_ref()) {
            self.core().drop_user_value(body);
            return Err(e);
        }
        Ok((read_vars, write_vars, body))
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
        type Raw: Copy + Send + Sync + 'static;
        /// The variables, one per datum (an array of exactly that many).
        type Vars: AsRef<[Var]>;
        /// Handles that keep the values alive (a prebuilt operator's).
        type Owned: Send + Sync + 'static;
        fn raw(&self) -> Self::Raw;
        fn vars(&self) -> Self::Vars;
        fn owned(&self) -> Self::Owned;
    }

    impl Side for () {
        type Raw = ();
        type Vars = [Var; 0];
        type Owned = ();
        fn raw(&self) {}
        fn owned(&self) {}
        fn vars(&self) -> [Var; 0] {
            []
        }
    }

    impl<T: Send + 'static> Side for &Data<T> {
        type Raw = Value<T>;
        type Vars = [Var; 1];
        type Owned = Data<T>;
        fn owned(&self) -> Data<T> {
            (*self).clone()
        }
        fn raw(&self) -> Value<T> {
            self.shared.value
        }
        fn vars(&self) -> [Var; 1] {
            [self.shared.var]
        }
    }

    /// A plain variable among typed data: an untyped resource, which the
    /// body receives as `()`.
    impl Side for Var {
        type Raw = ();
        type Vars = [Var; 1];
        type Owned = ();
        fn raw(&self) {}
        fn vars(&self) -> [Var; 1] {
            [*self]
        }
        fn owned(&self) {}
    }

    macro_rules! sides {
        ($n:literal: $($t:ident $i:tt),+) => {
            impl<$($t: sealed::Side<Vars = [Var; 1]>),+> sealed::Side for ($($t,)+) {
                type Raw = ($($t::Raw,)+);
                type Vars = [Var; $n];
                type Owned = ($($t::Owned,)+);
                fn owned(&self) -> Self::Owned {
                    ($(self.$i.owned(),)+)
                }
                fn raw(&self) -> Self::Raw {
                    ($(self.$i.raw(),)+)
                }
                fn vars(&self) -> [Var; $n] {
                    [$(self.$i.vars()[0],)+]
                }
            }
        };
    }
    pub(super) use sides;
}

/// The data an operation reads: `()`, a `&Data<T>`, or a tuple of up to
/// eight; its body receives `&T` in the same shape. A plain [`Var`] may
/// stand in a tuple (or alone) for an untyped resource; its body receives
/// `()` there.
pub trait Reads: sealed::Side<Raw: ReadRaw> {}

/// The data an operation writes: `()`, a `&Data<T>`, or a tuple of up to
/// eight; its body receives `&mut T` in the same shape (`()` for a plain
/// [`Var`]).
pub trait Writes: sealed::Side<Raw: WriteRaw> {}

/// The read side of an operation as it holds it: the values' blocks (one
/// [`Value`] or a tuple of them), which give the body its `&T`.
#[doc(hidden)]
pub trait ReadRaw: Copy + Send + 'static {
    /// The references the body receives.
    type Refs<'a>;
    /// # Safety
    /// The caller holds a read of each variable, and the values are alive.
    unsafe fn refs<'a>(self) -> Self::Refs<'a>;
}

/// The write side of an operation as it holds it, which gives the body
/// its `&mut T`.
#[doc(hidden)]
pub trait WriteRaw: Copy + Send + 'static {
    /// The references the body receives.
    type Muts<'a>;
    /// # Safety
    /// The caller holds a write of each variable (none twice), and the
    /// values are alive.
    unsafe fn muts<'a>(self) -> Self::Muts<'a>;
}

/// The references a body reading `R` receives.
pub type Refs<'a, R> = <<R as sealed::Side>::Raw as ReadRaw>::Refs<'a>;
/// The references a body writing `W` receives.
pub type Muts<'a, W> = <<W as sealed::Side>::Raw as WriteRaw>::Muts<'a>;

impl Reads for () {}
impl Writes for () {}
impl<T: Send + Sync + 'static> Reads for &Data<T> {}
impl<T: Send + 'static> Writes for &Data<T> {}
impl Reads for Var {}
impl Writes for Var {}

impl ReadRaw for () {
    type Refs<'a> = ();
    unsafe fn refs<'a>(self) -> Self::Refs<'a> {}
}

impl WriteRaw for () {
    type Muts<'a> = ();
    unsafe fn muts<'a>(self) -> Self::Muts<'a> {}
}

impl<T: Send + Sync + 'static> ReadRaw for Value<T> {
    type Refs<'a> = &'a T;
    unsafe fn refs<'a>(self) -> &'a T {
        // SAFETY: the caller's contract: a granted read, a live value.
        unsafe { &*self.get() }
    }
}

impl<T: Send + 'static> WriteRaw for Value<T> {
    type Muts<'a> = &'a mut T;
    unsafe fn muts<'a>(self) -> &'a mut T {
        // SAFETY: the caller's contract: a granted write, once, a live value.
        unsafe { &mut *self.get() }
    }
}

macro_rules! tuples {
    ($n:literal: $($t:ident $i:tt),+) => {
        sealed::sides!($n: $($t $i),+);

        impl<$($t: Reads + sealed::Side<Vars = [Var; 1]>),+> Reads for ($($t,)+) {}
        impl<$($t: Writes + sealed::Side<Vars = [Var; 1]>),+> Writes for ($($t,)+) {}

        impl<$($t: ReadRaw),+> ReadRaw for ($($t,)+) {
            type Refs<'a> = ($($t::Refs<'a>,)+);
            unsafe fn refs<'a>(self) -> Self::Refs<'a> {
                // SAFETY: the caller's contract, for each.
                ($(unsafe { self.$i.refs() },)+)
            }
        }

        impl<$($t: WriteRaw),+> WriteRaw for ($($t,)+) {
            type Muts<'a> = ($($t::Muts<'a>,)+);
            unsafe fn muts<'a>(self) -> Self::Muts<'a> {
                // SAFETY: the caller's contract, for each (no value twice:
                // the push checked).
                ($(unsafe { self.$i.muts() },)+)
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

impl<T: Send + 'static> Data<T> {
    /// The variable that guards the value: for the untyped waits
    /// ([`Engine::wait_var`]) and pushes, which order with the typed ones
    /// but cannot reach the value.
    pub fn var(&self) -> Var {
        self.shared.var
    }

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
    ///
    /// A guard borrows its handle, and cannot outlive it:
    ///
    /// ```compile_fail
    /// let engine = depengine::Engine::builder().build().unwrap();
    /// let x = engine.data(1u32);
    /// let guard = x.read().unwrap();
    /// drop(x);
    /// assert_eq!(*guard, 1);
    /// ```
    pub fn read(&self) -> Result<ReadGuard<'_, T>, EngineError>
    where
        T: Sync,
    {
        let (error, done) = self.acquire(false)?;
        Ok(ReadGuard { data: self, _held: self.granted(false, error, done)? })
    }

    /// Waits until every operation pushed so far on this data has finished,
    /// then gives exclusive access to the value: while the guard lives, the
    /// engine holds a write of it (later operations on it wait). Like an
    /// operation that writes without reading, it does not report an
    /// earlier failure, and clears it when the guard is dropped: read first
    /// to see one.
    pub fn write(&self) -> Result<WriteGuard<'_, T>, EngineError> {
        let (error, done) = self.acquire(true)?;
        Ok(WriteGuard { data: self, _held: self.granted(true, error, done)?, _not_sync: PhantomData })
    }

    /// [`read`](Self::read) as a future (see [`future`](crate::future)):
    /// the access is asked for at this call, in push order, and granted
    /// when the future resolves; no thread blocks meanwhile.
    ///
    /// ```
    /// let engine = depengine::Engine::builder().build().unwrap();
    /// let x = engine.data(vec![1, 2, 3]);
    /// engine.push_data((), &x, |_, (), x| x.push(4)).unwrap();
    /// let sum = depengine::future::block_on(async {
    ///     let x = x.read_async().await?;
    ///     Ok::<_, depengine::EngineError>(x.iter().sum::<i32>())
    /// });
    /// assert_eq!(sum.unwrap(), 10);
    /// ```
    pub fn read_async(&self) -> ReadAsync<'_, T>
    where
        T: Sync,
    {
        ReadAsync { data: self, hold: HoldWait::new(&self.shared.core, self.shared.var, false) }
    }

    /// [`write`](Self::write) as a future (see [`read_async`](Self::read_async)).
    /// A future dropped after the engine granted its access, before it was
    /// polled again, gives the access back as a guard dropped at once would:
    /// an empty write.
    pub fn write_async(&self) -> WriteAsync<'_, T> {
        WriteAsync { data: self, hold: HoldWait::new(&self.shared.core, self.shared.var, true) }
    }

    /// Pushes an access marker on this data's variable (a write if
    /// `write`) and waits until it grants the access: returns the failure
    /// the value holds and the completion that ends the access.
    fn acquire(&self, write: bool) -> Result<Granted, EngineError> {
        let core = &self.shared.core;
        let var = self.shared.var;
        if core.would_deadlock(Some(var)) {
            return Err(EngineError::WaitWouldDeadlock);
        }
        core.hold(var, write)
    }

    /// The access is granted: a read reports the value's failure (and
    /// gives the access back); otherwise the guard holds it.
    fn granted(&self, write: bool, error: Option<Arc<OpError>>, done: Completion) -> Result<Held, EngineError> {
        match error {
            Some(e) if !write => {
                done.signal();
                Err(EngineError::OpFailed(e))
            }
            _ => Ok(Held(Some(done))),
        }
    }
}

/// The future of [`Data::read_async`].
#[must_use = "a future does nothing unless awaited"]
pub struct ReadAsync<'a, T: Send + 'static> {
    data: &'a Data<T>,
    hold: HoldWait<'a>,
}

impl<'a, T: Send + Sync + 'static> Future for ReadAsync<'a, T> {
    type Output = Result<ReadGuard<'a, T>, EngineError>;

    fn poll(self: Pin<&mut Self>, cx: &mut std::task::Context<'_>) -> Poll<Self::Output> {
        let me = self.get_mut();
        me.hold.poll_hold(cx).map(|held| {
            let (error, done) = held?;
            Ok(ReadGuard { data: me.data, _held: me.data.granted(false, error, done)? })
        })
    }
}

/// The future of [`Data::write_async`].
#[must_use = "a future does nothing unless awaited"]
pub struct WriteAsync<'a, T: Send + 'static> {
    data: &'a Data<T>,
    hold: HoldWait<'a>,
}

impl<'a, T: Send + 'static> Future for WriteAsync<'a, T> {
    type Output = Result<WriteGuard<'a, T>, EngineError>;

    fn poll(self: Pin<&mut Self>, cx: &mut std::task::Context<'_>) -> Poll<Self::Output> {
        let me = self.get_mut();
        me.hold.poll_hold(cx).map(|held| {
            let (error, done) = held?;
            Ok(WriteGuard { data: me.data, _held: me.data.granted(true, error, done)?, _not_sync: PhantomData })
        })
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
