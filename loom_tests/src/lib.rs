//! Loom models of depengine driven through its public API: waits against
//! completions on other threads, deletion against pending operations, and
//! completions signalled or dropped on foreign threads. The models live in
//! `tests/engine.rs` and only build under `--cfg depengine_loom`; see
//! `README.md` here for how to run them and what each one checks.
