//! The standard workloads of `shared/WORKLOADS.md`, generated before the
//! clock starts and pushed exactly as the peers push them.

use depengine::{Data, Engine, PushOpts, Var};
use std::hint::black_box;

/// splitmix64, seeded with 42 unless said otherwise.
pub(crate) struct SplitMix(u64);

impl SplitMix {
    pub(crate) fn new(seed: u64) -> Self {
        SplitMix(seed)
    }

    pub(crate) fn draw(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    pub(crate) fn uniform(&mut self, n: u64) -> u64 {
        self.draw() % n
    }
}

/// The work body: `w` xorshift64 steps on `index + 1`, its result sunk
/// with `black_box`, as the peers' harnesses sink theirs (an empty `asm`
/// in `shared/peers/cxx/common.hpp`, a per-thread volatile in MXNet's
/// bench): no body writes a line that another core's body writes too.
/// (Until 2026-11-27 it stored to one shared atomic; PERF.md has the A/B.)
///
/// With `--timeline`, the body records when it ran (`timeline.rs`).
#[inline]
pub(crate) fn work(index: u64, w: u32) {
    if w == 0 {
        return;
    }
    crate::timeline::time(index, || {
        let mut x = index + 1;
        for _ in 0..w {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x = black_box(x);
        }
        black_box(x);
    });
}

/// Every throughput workload.
pub(crate) const THROUGHPUT: [&str; 6] = ["nodeps", "chain", "chains64", "fanout", "random", "layered"];

/// `chain` and `chains64` on typed data (`Engine::push_data`): each body
/// also adds one to its variable's `u64`. Not in the default set (no
/// peer runs them); asked for with `--workloads`, they price a typed push
/// against an untyped one.
pub(crate) const TYPED: [&str; 2] = ["typed_chain", "typed_chains64"];

/// Operation names by (reads, writes).
const SHAPES: [[&str; 3]; 4] =
    [["r0w0", "r0w1", "r0w2"], ["r1w0", "r1w1", "r1w2"], ["r2w0", "r2w1", "r2w2"], ["r3w0", "r3w1", "r3w2"]];

/// One operation's variables (indices into the workload's variable list).
#[derive(Clone, Copy, Default)]
pub(crate) struct OpVars {
    nr: u8,
    nw: u8,
    vars: [u16; 5],
}

impl OpVars {
    fn new(reads: &[u16], writes: &[u16]) -> Self {
        let mut v = OpVars { nr: reads.len() as u8, nw: writes.len() as u8, vars: [0; 5] };
        v.vars[..reads.len()].copy_from_slice(reads);
        v.vars[reads.len()..reads.len() + writes.len()].copy_from_slice(writes);
        v
    }
}

/// A workload: how many variables, and each operation's reads and writes.
pub(crate) struct Workload {
    pub(crate) name: &'static str,
    pub(crate) vars: usize,
    pub(crate) ops: Vec<OpVars>,
    /// Pushed on typed data ([`TYPED`]).
    pub(crate) typed: bool,
}

impl Workload {
    /// Builds workload `name` with `n` operations (as WORKLOADS.md defines).
    pub(crate) fn build(name: &str, n: usize) -> Option<Workload> {
        if let Some(untyped) = name.strip_prefix("typed_").filter(|_| TYPED.contains(&name)) {
            let wl = Workload::build(untyped, n)?;
            let name = TYPED.into_iter().find(|t| *t == name)?;
            return Some(Workload { name, typed: true, ..wl });
        }
        let (name, vars, ops): (&'static str, usize, Vec<OpVars>) = match name {
            "nodeps" => ("nodeps", 0, vec![OpVars::default(); n]),
            "chain" => ("chain", 1, vec![OpVars::new(&[], &[0]); n]),
            "chains64" => ("chains64", 64, (0..n).map(|i| OpVars::new(&[], &[(i % 64) as u16])).collect()),
            "fanout" => {
                let ops = (0..n / 17)
                    .flat_map(|_| {
                        (0..17u16).map(|j| if j == 0 { OpVars::new(&[], &[0]) } else { OpVars::new(&[0], &[j]) })
                    })
                    .collect();
                ("fanout", 17, ops)
            }
            "random" => {
                let mut rng = SplitMix::new(42);
                let ops = (0..n)
                    .map(|_| {
                        let nr = rng.uniform(4) as usize;
                        let nw = 1 + rng.uniform(2) as usize;
                        let mut picked: Vec<u16> = Vec::with_capacity(nr + nw);
                        while picked.len() < nr + nw {
                            let v = rng.uniform(256) as u16;
                            if !picked.contains(&v) {
                                picked.push(v);
                            }
                        }
                        OpVars::new(&picked[..nr], &picked[nr..])
                    })
                    .collect();
                ("random", 256, ops)
            }
            "layered" => {
                let ops = (0..n / 64)
                    .flat_map(|l| {
                        (0..64u16).map(move |j| {
                            let (p, q) = if l % 2 == 0 { (0u16, 64u16) } else { (64, 0) };
                            if l == 0 {
                                OpVars::new(&[], &[q + j])
                            } else {
                                OpVars::new(&[p + (j + 63) % 64, p + j, p + (j + 1) % 64], &[q + j])
                            }
                        })
                    })
                    .collect();
                ("layered", 128, ops)
            }
            _ => return None,
        };
        Some(Workload { name, vars, ops, typed: false })
    }

    /// Pushes every operation with body weight `w`.
    /// Operations are named by shape (`r2w1`: two reads, one write) so
    /// that a profile's summary splits them.
    pub(crate) fn push_all(&self, engine: &Engine, vars: &[Var], w: u32) {
        if self.typed {
            return self.push_typed(engine, w);
        }
        let Some(&first) = vars.first() else {
            for i in 0..self.ops.len() as u64 {
                engine.push_sync_with(move |_| work(i, w), &[], &[], PushOpts::new().name("r0w0")).expect("push");
            }
            return;
        };
        // One buffer for every push, each filling only its own entries: set
        // up afresh for each, it cost `chain` 6 % of its W=0 time, a cost
        // `nodeps` (no variables) never paid (perf/journal/2026-11-28.md, "thirteenth session").
        let mut buf = [first; 5];
        for (i, op) in self.ops.iter().enumerate() {
            let i = i as u64;
            let n = (op.nr + op.nw) as usize;
            for (slot, &v) in buf[..n].iter_mut().zip(&op.vars[..n]) {
                *slot = vars[v as usize];
            }
            let (reads, writes) = buf[..n].split_at(op.nr as usize);
            let name = SHAPES[op.nr as usize][op.nw as usize];
            engine.push_sync_with(move |_| work(i, w), reads, writes, PushOpts::new().name(name)).expect("push");
        }
    }
}

impl Workload {
    /// A typed workload: one `Data<u64>` per variable (made for this
    /// repetition; their deletions run after its operations), each
    /// operation writing its one datum.
    fn push_typed(&self, engine: &Engine, w: u32) {
        let data: Vec<Data<u64>> = (0..self.vars).map(|_| engine.data(0)).collect();
        for (i, op) in self.ops.iter().enumerate() {
            assert_eq!((op.nr, op.nw), (0, 1), "typed workloads write one datum");
            let i = i as u64;
            let body = move |_: &depengine::RunContext, (), x: &mut u64| {
                work(i, w);
                *x += 1;
            };
            engine.push_data_with((), &data[op.vars[0] as usize], PushOpts::new().name("r0w1"), body).expect("push");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use depengine::EngineKind;

    /// Every write of every workload reaches its variable: after a run,
    /// each variable's version is the number of operations that write it
    /// by WORKLOADS.md's definitions, worked out here without the op list
    /// (`random` against the op list, whose draws the test cannot redo
    /// more simply).
    #[test]
    fn each_push_writes_the_variables_the_workload_names() {
        let n = 64 * 17 * 2;
        for name in THROUGHPUT {
            let wl = Workload::build(name, n).expect("a workload");
            assert_eq!(wl.ops.len(), n, "{name}");
            let expected: Vec<u64> = match name {
                "nodeps" => vec![],
                "chain" => vec![n as u64],
                "chains64" => vec![(n / 64) as u64; 64],
                "fanout" => vec![(n / 17) as u64; 17],
                "layered" => vec![(n / 64 / 2) as u64; 128],
                _ => {
                    let mut writes = vec![0u64; wl.vars];
                    for op in &wl.ops {
                        for &v in &op.vars[op.nr as usize..(op.nr + op.nw) as usize] {
                            writes[v as usize] += 1;
                        }
                    }
                    writes
                }
            };
            for kind in [EngineKind::Naive, EngineKind::PerDevice] {
                let engine = Engine::builder().kind(kind).cpu_workers(2).build().expect("engine");
                let vars: Vec<Var> = (0..wl.vars).map(|_| engine.new_var()).collect();
                wl.push_all(&engine, &vars, 0);
                engine.wait_all().expect("the workload ran");
                let versions: Vec<u64> = vars.iter().map(|&v| engine.var_version(v).expect("a version")).collect();
                assert_eq!(versions, expected, "{name} on {kind:?}");
                assert_eq!(engine.stats().finished, n as u64, "{name} on {kind:?}");
            }
        }
    }
}
