//! Fuzzes the API with misuse: random sequences of calls on a fresh engine
//! of each kind, including every bad input the failure rules name — deleted, twice
//! deleted and foreign variables, GPU contexts that do not exist, waits
//! from inside an operation on a variable it holds (and `wait_all` /
//! `shutdown` from inside any operation), pushes after shutdown, operators
//! over deleted variables, bulking across all of it; and user code that
//! panics where the engine drops it (a panic payload whose `Drop` panics,
//! captures that panic when dropped unrun) or drops the last handle of its
//! own engine from a body.
//!
//! Each call's result is checked against what the documentation promises
//! (an error of the right kind exactly when the input is bad); nothing may
//! panic across the API or hang (libFuzzer's `-timeout`), and afterwards no
//! operation block may still be live (no leak).
#![no_main]

use arbitrary::Arbitrary;
use depengine::{Context, Engine, EngineError, EngineKind, FnProperty, Operator, PushOpts, Var};
use libfuzzer_sys::fuzz_target;
use std::sync::{Arc, Mutex, OnceLock};

/// Variable handles one input keeps at most (live and deleted).
const MAX_VARS: usize = 8;

#[derive(Arbitrary, Debug, Clone, Copy)]
enum Call {
    NewVar,
    DeleteVar(u8),
    /// Masks over the handles; `foreign` adds another engine's variable.
    Push {
        reads: u8,
        writes: u8,
        asynchronous: bool,
        gpu: bool,
        foreign: bool,
        fail: bool,
        /// 1: the closure captures a [`Bomb`]; 2: the body panics with one.
        bomb: u8,
    },
    WaitVar(u8),
    WaitToWrite(u8),
    WaitAll,
    VarVersion(u8),
    NewOperator {
        reads: u8,
        writes: u8,
        asynchronous: bool,
    },
    PushOp {
        op: u8,
        gpu: bool,
    },
    DeleteOperator(u8),
    /// An operation holding the variable calls a wait (or shutdown) on it.
    BlockInsideOp {
        var: u8,
        how: u8,
    },
    BulkSize(u8),
    FlushBulk,
    Shutdown,
    ShutdownCancel,
    /// The program's handle goes into a body pushed on a variable, which
    /// drops it: the last handle dropped inside the engine's own operation.
    /// Ends the input for this engine.
    DropEngineInBody(u8),
}

/// A value whose `Drop` panics, with another `Bomb` as the payload while
/// `0` is above zero (so that dropping the payload panics too).
struct Bomb(u8);

/// The payload of the last `Bomb` in a chain.
struct BombWentOff;

impl Drop for Bomb {
    fn drop(&mut self) {
        if self.0 > 0 {
            std::panic::panic_any(Bomb(self.0 - 1));
        }
        std::panic::panic_any(BombWentOff);
    }
}

/// libfuzzer-sys aborts on every panic, caught or not; a `Bomb`'s panics
/// are the input's own, which the engine must survive, so they pass.
fn let_bombs_through() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            let p = info.payload();
            if !(p.is::<Bomb>() || p.is::<BombWentOff>()) {
                previous(info);
            }
        }));
    });
}

/// A variable of an engine nobody else uses.
fn foreign_var() -> Var {
    static FOREIGN: OnceLock<(Engine, Var)> = OnceLock::new();
    FOREIGN
        .get_or_init(|| {
            let engine = Engine::builder().kind(EngineKind::Naive).build().expect("engine");
            let v = engine.new_var();
            (engine, v)
        })
        .1
}

struct World {
    kind: EngineKind,
    engine: Arc<Engine>,
    /// Handles and whether each was deleted.
    vars: Vec<(Var, bool)>,
    /// Operators and the handles they use.
    ops: Vec<(Operator, Vec<usize>)>,
    shut: bool,
    /// Broken promises seen inside bodies.
    violations: Arc<Mutex<Vec<String>>>,
}

/// Fails the input with `what` unless `result` is `Ok` exactly when `ok`,
/// and any error is one of `allowed`.
fn expect<T: std::fmt::Debug>(
    kind: EngineKind,
    what: &str,
    result: &Result<T, EngineError>,
    ok: bool,
    allowed: &[fn(&EngineError) -> bool],
) {
    match result {
        Ok(_) => assert!(ok, "{kind:?}: {what}: accepted, but the input is bad"),
        Err(e) => {
            assert!(!ok, "{kind:?}: {what}: refused a good input: {e}");
            assert!(allowed.iter().any(|a| a(e)), "{kind:?}: {what}: unexpected error {e:?}");
        }
    }
}

fn is_deleted(e: &EngineError) -> bool {
    matches!(e, EngineError::DeletedVar)
}
fn is_foreign(e: &EngineError) -> bool {
    matches!(e, EngineError::ForeignVar)
}
fn is_no_device(e: &EngineError) -> bool {
    matches!(e, EngineError::NoSuchDevice(_))
}
fn is_shut(e: &EngineError) -> bool {
    matches!(e, EngineError::ShutDown)
}
fn is_op_failed(e: &EngineError) -> bool {
    matches!(e, EngineError::OpFailed(_))
}
fn is_deleted_twice(e: &EngineError) -> bool {
    matches!(e, EngineError::DeletedTwice)
}

impl World {
    fn pick(&self, mask: u8) -> Vec<usize> {
        (0..self.vars.len()).filter(|i| mask & (1 << i) != 0).collect()
    }

    fn handle(&self, i: u8) -> Option<usize> {
        (!self.vars.is_empty()).then(|| i as usize % self.vars.len())
    }

    fn any_deleted(&self, handles: &[usize]) -> bool {
        handles.iter().any(|&h| self.vars[h].1)
    }

    fn call(&mut self, call: &Call) {
        let (kind, engine) = (self.kind, self.engine.clone());
        match *call {
            Call::NewVar => {
                if self.vars.len() < MAX_VARS {
                    self.vars.push((engine.new_var(), false));
                }
            }
            Call::DeleteVar(i) => {
                let Some(h) = self.handle(i) else { return };
                let (var, deleted) = self.vars[h];
                let result = engine.delete_var(var, || {});
                if self.shut {
                    assert!(result.is_err(), "{kind:?}: delete after shutdown accepted");
                } else {
                    expect(kind, "delete_var", &result, !deleted, &[is_deleted_twice]);
                }
                self.vars[h].1 |= result.is_ok() || deleted;
            }
            Call::Push { reads, writes, asynchronous, gpu, foreign, fail, bomb } => {
                let captured = (bomb % 3 == 1).then(|| Bomb(1));
                let panics = bomb % 3 == 2;
                let (r, w) = (self.pick(reads), self.pick(writes));
                let mut read_vars: Vec<Var> = r.iter().map(|&h| self.vars[h].0).collect();
                let write_vars: Vec<Var> = w.iter().map(|&h| self.vars[h].0).collect();
                if foreign {
                    read_vars.push(foreign_var());
                }
                let opts = PushOpts::new().name("misuse").ctx(if gpu { Context::Gpu(0) } else { Context::cpu() });
                let result = if asynchronous {
                    engine.push_async_with(
                        move |_, done| {
                            let _keep = captured;
                            if panics {
                                std::panic::panic_any(Bomb(1));
                            }
                            if fail {
                                done.fail("asked to fail")
                            } else {
                                done.signal()
                            }
                        },
                        &read_vars,
                        &write_vars,
                        opts,
                    )
                } else {
                    engine.push_sync_with(
                        move |_| {
                            let _keep = captured;
                            if panics {
                                std::panic::panic_any(Bomb(1));
                            }
                            if fail {
                                Err("asked to fail")
                            } else {
                                Ok(())
                            }
                        },
                        &read_vars,
                        &write_vars,
                        opts,
                    )
                };
                let deleted = self.any_deleted(&r) || self.any_deleted(&w);
                let good = !(deleted || foreign || gpu || self.shut);
                expect(kind, "push", &result, good, &[is_deleted, is_foreign, is_no_device, is_shut]);
            }
            Call::WaitVar(i) | Call::WaitToWrite(i) => {
                let Some(h) = self.handle(i) else { return };
                let (var, deleted) = self.vars[h];
                let result = if let Call::WaitVar(_) = call { engine.wait_var(var) } else { engine.wait_to_write(var) };
                if !result.as_ref().is_err_and(is_op_failed) {
                    expect(kind, "wait on a variable", &result, !deleted && !self.shut, &[is_deleted, is_shut]);
                }
            }
            Call::WaitAll => {
                let result = engine.wait_all();
                if !result.as_ref().is_err_and(is_op_failed) {
                    expect(kind, "wait_all", &result, true, &[]);
                }
            }
            Call::VarVersion(i) => {
                let Some(h) = self.handle(i) else { return };
                let (var, deleted) = self.vars[h];
                expect(kind, "var_version", &engine.var_version(var), !deleted, &[is_deleted]);
            }
            Call::NewOperator { reads, writes, asynchronous } => {
                let (r, w) = (self.pick(reads), self.pick(writes));
                let read_vars: Vec<Var> = r.iter().map(|&h| self.vars[h].0).collect();
                let write_vars: Vec<Var> = w.iter().map(|&h| self.vars[h].0).collect();
                let result = if asynchronous {
                    engine.new_async_operator(
                        |_, done| done.signal(),
                        &read_vars,
                        &write_vars,
                        FnProperty::Normal,
                        "op",
                    )
                } else {
                    engine.new_operator(|_| {}, &read_vars, &write_vars, FnProperty::Normal, "op")
                };
                let deleted = self.any_deleted(&r) || self.any_deleted(&w);
                // Building an operator pushes nothing: after shutdown it may
                // be built (pushing it is refused) or refused at once.
                let good = !(deleted || (self.shut && result.is_err()));
                expect(kind, "new_operator", &result, good, &[is_deleted, is_shut]);
                if let Ok(op) = result {
                    self.ops.push((op, [r, w].concat()));
                }
            }
            Call::PushOp { op, gpu } => {
                if self.ops.is_empty() {
                    return;
                }
                let (operator, handles) = &self.ops[op as usize % self.ops.len()];
                let result = engine.push_op(operator, if gpu { Context::Gpu(0) } else { Context::cpu() }, 0);
                let good = !(self.any_deleted(handles) || gpu || self.shut);
                expect(kind, "push_op", &result, good, &[is_deleted, is_no_device, is_shut]);
            }
            Call::DeleteOperator(i) => {
                if !self.ops.is_empty() {
                    let (op, _) = self.ops.swap_remove(i as usize % self.ops.len());
                    engine.delete_operator(op);
                }
            }
            Call::BlockInsideOp { var, how } => {
                let Some(h) = self.handle(var) else { return };
                let (v, deleted) = self.vars[h];
                let (e, violations) = (engine.clone(), self.violations.clone());
                let result = engine.push_sync(
                    move |_| {
                        let (what, result) = match how % 4 {
                            0 => ("wait_var", e.wait_var(v)),
                            1 => ("wait_to_write", e.wait_to_write(v)),
                            2 => ("wait_all", e.wait_all()),
                            _ => ("shutdown", e.shutdown()),
                        };
                        // The program may delete the variable before the body
                        // runs; a wait on it is then refused as deleted.
                        let deleted_meanwhile = how % 4 < 2 && result == Err(EngineError::DeletedVar);
                        if result != Err(EngineError::WaitWouldDeadlock) && !deleted_meanwhile {
                            violations.lock().unwrap().push(format!("{kind:?}: {what} inside an op gave {result:?}"));
                        }
                    },
                    &[],
                    &[v],
                );
                expect(kind, "push", &result, !deleted && !self.shut, &[is_deleted, is_shut]);
            }
            Call::BulkSize(n) => {
                engine.set_bulk_size(n as usize % 6).expect("set_bulk_size");
            }
            Call::FlushBulk => {
                let result = engine.flush_bulk();
                if !self.shut {
                    expect(kind, "flush_bulk", &result, true, &[]);
                }
            }
            Call::DropEngineInBody(_) => unreachable!("handled by the input's loop"),
            Call::Shutdown | Call::ShutdownCancel => {
                let result = if let Call::Shutdown = call { engine.shutdown() } else { engine.shutdown_cancel() };
                expect(kind, "shutdown", &result, true, &[]);
                self.shut = true;
            }
        }
    }

    /// Drains, deletes what is left and checks that nothing leaked.
    fn finish(mut self) {
        let kind = self.kind;
        self.engine.set_bulk_size(0).expect("set_bulk_size");
        let _ = self.engine.wait_all();
        for (op, _) in self.ops.drain(..) {
            self.engine.delete_operator(op);
        }
        if !self.shut {
            for &(v, deleted) in &self.vars {
                if !deleted {
                    self.engine.delete_var(v, || {}).expect("delete at the end");
                }
            }
        }
        let _ = self.engine.wait_all();
        let violations = self.violations.lock().unwrap();
        assert!(violations.is_empty(), "{violations:?}");
        let stats = self.engine.pool_stats();
        assert_eq!(stats.live_ops, 0, "{kind:?}: operation blocks leaked: {stats:?}");
        if !self.shut {
            assert_eq!(stats.live_vars, 0, "{kind:?}: variables leaked: {stats:?}");
        }
    }
}

/// Ends the input with the program's last handle dropped inside a body
/// pushed on handle `i` (or with no variables): the engine must finish its
/// work and shut down on its own, and nothing may crash meanwhile.
fn drop_engine_in_body(world: World, i: u8) {
    let World { engine, vars, ops, .. } = world;
    let var: Vec<Var> =
        vars.iter().filter(|(_, deleted)| !deleted).map(|&(v, _)| v).cycle().nth(i as usize).into_iter().collect();
    drop(ops);
    let mine = engine.clone();
    // Refused (after shutdown, or the variable deleted meanwhile): the
    // closure, and the handle in it, are dropped here instead.
    let _ = engine.push_sync(move |_| drop(mine), &[], &var);
}

fuzz_target!(|calls: Vec<Call>| {
    let_bombs_through();
    let calls = &calls[..calls.len().min(64)];
    for kind in EngineKind::ALL {
        let engine = Arc::new(Engine::builder().kind(kind).cpu_workers(2).build().expect("engine"));
        let mut world =
            Some(World { kind, engine, vars: Vec::new(), ops: Vec::new(), shut: false, violations: Arc::default() });
        for call in calls {
            match (*call, world.take()) {
                (Call::DropEngineInBody(i), Some(w)) => drop_engine_in_body(w, i),
                (_, Some(mut w)) => {
                    w.call(call);
                    world = Some(w);
                }
                (_, None) => break,
            }
        }
        if let Some(w) = world {
            w.finish();
        }
    }
});
