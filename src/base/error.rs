//! Errors: what the API returns ([`EngineError`]) and what a failed
//! operation leaves on the variables it wrote ([`OpError`]).

use std::fmt;
use std::sync::Arc;

/// The failure of one operation, recorded on every variable it writes and
/// inherited by the operations that read them.
///
/// The same `Arc` flows down the graph, so [`OpError::op_name`] always names
/// the operation that failed first, not the ones skipped because of it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OpError {
    op_name: String,
    message: String,
}

impl OpError {
    pub(crate) fn new(op_name: &str, message: impl Into<String>) -> Arc<Self> {
        Arc::new(OpError { op_name: op_name.to_owned(), message: message.into() })
    }

    /// The name given to the operation that failed first (`"<unnamed>"` if none).
    pub fn op_name(&self) -> &str {
        &self.op_name
    }

    /// What went wrong: the panic message or the returned error's text.
    pub fn message(&self) -> &str {
        &self.message
    }
}

impl fmt::Display for OpError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "operation `{}` failed: {}", self.op_name, self.message)
    }
}

impl std::error::Error for OpError {}

/// Everything an engine call can report.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum EngineError {
    /// An operation failed; waits report the failure that a variable (or,
    /// for `wait_all`, the engine) holds.
    OpFailed(Arc<OpError>),
    /// The variable was deleted (or its deletion was already requested).
    DeletedVar,
    /// `delete_var` was called twice on the same variable.
    DeletedTwice,
    /// The variable belongs to another engine.
    ForeignVar,
    /// The context names a device that does not exist (or GPU support is off).
    NoSuchDevice(String),
    /// A wait was called from inside an operation on a variable that the
    /// operation holds (or `wait_all` from inside any operation): it could
    /// never return.
    WaitWouldDeadlock,
    /// The engine is shutting down and takes no more work.
    ShutDown,
    /// A setting (builder or environment variable) is invalid.
    Config(String),
    /// [`Engine::shutdown_timeout`](crate::Engine::shutdown_timeout) gave
    /// up: `pending` operations had not finished (an asynchronous one whose
    /// `Completion` was kept or forgotten, a body that never returns);
    /// `report` says which, as a hang report does.
    Timeout {
        /// Operations still pending when it gave up.
        pending: u64,
        /// What they are and what each waits for ([`HangReport`](crate::HangReport)'s text).
        report: String,
    },
    /// A thread of the engine could not be started (`build`); the text is
    /// the operating system's error. Nothing of the engine keeps running.
    Spawn(String),
    /// A CUDA call the engine made to order GPU work (feature `cuda`)
    /// failed; the text is the driver's error.
    Gpu(String),
    /// A typed push named the same data twice among its writes, or among
    /// its reads and its writes ([`Engine::push_data`](crate::Engine::push_data)):
    /// its body would get two references to one value, one of them `&mut`.
    AliasedData,
}

impl fmt::Display for EngineError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            EngineError::OpFailed(e) => e.fmt(f),
            EngineError::DeletedVar => f.write_str("the variable has been deleted"),
            EngineError::DeletedTwice => f.write_str("the variable was already deleted"),
            EngineError::ForeignVar => f.write_str("the variable belongs to another engine"),
            EngineError::NoSuchDevice(what) => write!(f, "no such device: {what}"),
            EngineError::WaitWouldDeadlock => f.write_str(
                "a wait inside an operation on a variable it holds (or wait_all inside an operation) would deadlock",
            ),
            EngineError::ShutDown => f.write_str("the engine is shutting down"),
            EngineError::Config(what) => write!(f, "invalid engine setting: {what}"),
            EngineError::Timeout { pending, report } => {
                write!(f, "gave up waiting for {pending} pending operation(s)\n{report}")
            }
            EngineError::Spawn(what) => write!(f, "could not start an engine thread: {what}"),
            EngineError::Gpu(what) => write!(f, "GPU error: {what}"),
            EngineError::AliasedData => {
                f.write_str("the same data twice among an operation's writes, or among its reads and its writes")
            }
        }
    }
}

impl std::error::Error for EngineError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            EngineError::OpFailed(e) => Some(&**e),
            _ => None,
        }
    }
}

/// What an operation body may return: `()` or any `Result<(), E>` whose error
/// converts into a boxed error. An `Err` fails the operation like a panic.
pub trait OpOutput {
    /// Converts the body's return value into the engine's outcome.
    fn into_outcome(self) -> Result<(), String>;
}

impl OpOutput for () {
    #[inline(always)]
    fn into_outcome(self) -> Result<(), String> {
        Ok(())
    }
}

/// Names the never type `!` on stable Rust: the output of `fn() -> !`.
#[doc(hidden)]
pub trait HasOutput {
    /// The function's output type.
    type Output;
}

impl<T> HasOutput for fn() -> T {
    type Output = T;
}

/// The never type, `!`: what a body that only panics returns.
type Never = <fn() -> ! as HasOutput>::Output;

/// A body that only panics (`|_| panic!()`, `|_| unreachable!()`): it
/// compiles, and the operation fails with the panic's message.
impl OpOutput for Never {
    fn into_outcome(self) -> Result<(), String> {
        self
    }
}

impl<E: fmt::Display> OpOutput for Result<(), E> {
    #[inline(always)]
    fn into_outcome(self) -> Result<(), String> {
        self.map_err(|e| e.to_string())
    }
}

/// The text of a caught panic payload.
pub(crate) fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    if let Some(s) = payload.downcast_ref::<&str>() {
        format!("panicked: {s}")
    } else if let Some(s) = payload.downcast_ref::<String>() {
        format!("panicked: {s}")
    } else {
        "panicked".to_owned()
    }
}
