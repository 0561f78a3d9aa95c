//! One training step of a tiled two-layer perceptron on typed data,
//! checked against a serial run and timed against the ways of sharing the
//! tiles without typed data: `UnsafeCell` tiles behind plain variables
//! (`unsafe` at every access), `Mutex` tiles (locks the engine's ordering
//! makes useless), and rayon, one `par_iter` per phase.
//!
//! The step, on 512 × 512 `f32` matrices in 64 × 64 tiles (one datum per
//! tile), with loss ½‖Y‖² so that dY = Y:
//!
//! ```text
//! H  = relu(X · W1)          512 tile products + 64 relus
//! Y  = H · W2                512 tile products
//! dW2 = Hᵀ · Y               512 tile products
//! dH = (Y · W2ᵀ) ⊙ (H > 0)   512 tile products + 64 masks
//! ```
//!
//! 2,176 operations a step. Each tile product adds A·B into its output
//! tile, pushed in the order of the sum, so every version sums in the same
//! order and must match the serial result bit for bit.
//!
//! ```text
//! cargo run --release --example mlp -- [STEPS] [per_device|pooled|naive]
//! ```
//!
//! Leaving a tile out of an operation's reads does not compile with typed
//! data (the body cannot reach it); see the compile-fail example in the
//! docs of `Engine::push_data`.

use depengine::{Data, Engine, EngineKind, Var};
use rayon::prelude::*;
use std::cell::UnsafeCell;
use std::sync::{Arc, Mutex};
use std::time::Instant;

/// Matrix side.
const N: usize = 512;
/// Tile side.
const T: usize = 64;
/// Tiles per matrix side.
const TILES: usize = N / T;

type Tile = Vec<f32>;

/// The matrices of a step.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum M {
    X,
    W1,
    H,
    W2,
    Y,
    DW2,
    DH,
}

const MATRICES: [M; 7] = [M::X, M::W1, M::H, M::W2, M::Y, M::DW2, M::DH];

/// One operation of the step, on tiles named by matrix and (row, column).
#[derive(Clone, Copy, Debug)]
enum Op {
    /// `c (=|+=) a' · b'`, where `'` transposes when asked; `=` for the
    /// first term of the sum.
    Product { c: (M, usize, usize), a: (M, usize, usize), b: (M, usize, usize), ta: bool, tb: bool, first: bool },
    /// `h = max(h, 0)`.
    Relu { h: (M, usize, usize) },
    /// `dh *= (h > 0)`.
    Mask { h: (M, usize, usize), dh: (M, usize, usize) },
}

/// The step's operations in push order.
fn step_ops() -> Vec<Op> {
    let mut ops = Vec::new();
    let product = |ops: &mut Vec<Op>, c: M, a: (M, bool), b: (M, bool)| {
        for i in 0..TILES {
            for j in 0..TILES {
                for k in 0..TILES {
                    let at = if a.1 { (a.0, k, i) } else { (a.0, i, k) };
                    let bt = if b.1 { (b.0, j, k) } else { (b.0, k, j) };
                    ops.push(Op::Product { c: (c, i, j), a: at, b: bt, ta: a.1, tb: b.1, first: k == 0 });
                }
            }
        }
    };
    let each = |ops: &mut Vec<Op>, f: &dyn Fn(usize, usize) -> Op| {
        for i in 0..TILES {
            for j in 0..TILES {
                ops.push(f(i, j));
            }
        }
    };
    product(&mut ops, M::H, (M::X, false), (M::W1, false));
    each(&mut ops, &|i, j| Op::Relu { h: (M::H, i, j) });
    product(&mut ops, M::Y, (M::H, false), (M::W2, false));
    product(&mut ops, M::DW2, (M::H, true), (M::Y, false));
    product(&mut ops, M::DH, (M::Y, false), (M::W2, true));
    each(&mut ops, &|i, j| Op::Mask { h: (M::H, i, j), dh: (M::DH, i, j) });
    ops
}

/// `c (=|+=) a' · b'` on tiles.
fn product(c: &mut [f32], a: &[f32], b: &[f32], ta: bool, tb: bool, first: bool) {
    if first {
        c.fill(0.0);
    }
    for i in 0..T {
        for k in 0..T {
            let aik = if ta { a[k * T + i] } else { a[i * T + k] };
            let row = &mut c[i * T..(i + 1) * T];
            if tb {
                for (j, cj) in row.iter_mut().enumerate() {
                    *cj += aik * b[j * T + k];
                }
            } else {
                for (cj, bj) in row.iter_mut().zip(&b[k * T..(k + 1) * T]) {
                    *cj += aik * bj;
                }
            }
        }
    }
}

fn relu(h: &mut [f32]) {
    h.iter_mut().for_each(|x| *x = x.max(0.0));
}

fn mask(h: &[f32], dh: &mut [f32]) {
    dh.iter_mut().zip(h).for_each(|(d, h)| *d = if *h > 0.0 { *d } else { 0.0 });
}

/// A matrix's starting tiles: small pseudo-random values for the inputs,
/// zeros for the rest.
fn initial(m: M) -> Vec<Tile> {
    let seed = MATRICES.iter().position(|x| *x == m).unwrap() as u64 + 1;
    let mut state = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15);
    let mut next = || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        ((state >> 40) as f32 / (1u64 << 24) as f32 - 0.5) * 0.1
    };
    let input = matches!(m, M::X | M::W1 | M::W2);
    (0..TILES * TILES).map(|_| (0..T * T).map(|_| if input { next() } else { 0.0 }).collect()).collect()
}

fn at(t: (M, usize, usize)) -> (usize, usize) {
    (t.0 as usize, t.1 * TILES + t.2)
}

/// The reference: the operations in order on one thread.
fn serial(ops: &[Op]) -> Vec<Vec<Tile>> {
    let mut g: Vec<Vec<Tile>> = MATRICES.iter().map(|&m| initial(m)).collect();
    for op in ops {
        match *op {
            Op::Product { c, a, b, ta, tb, first } => {
                let ((cm, ci), (am, ai), (bm, bi)) = (at(c), at(a), at(b));
                let (a, b) = (g[am][ai].clone(), g[bm][bi].clone());
                product(&mut g[cm][ci], &a, &b, ta, tb, first);
            }
            Op::Relu { h } => {
                let (m, i) = at(h);
                relu(&mut g[m][i]);
            }
            Op::Mask { h, dh } => {
                let ((hm, hi), (dm, di)) = (at(h), at(dh));
                let h = g[hm][hi].clone();
                mask(&h, &mut g[dm][di]);
            }
        }
    }
    g
}

/// Typed data: the body receives its tiles, and only those.
fn typed(engine: &Engine, ops: &[Op], g: &[Vec<Data<Tile>>]) {
    let d = |t: (M, usize, usize)| {
        let (m, i) = at(t);
        &g[m][i]
    };
    for op in ops {
        match *op {
            Op::Product { c, a, b, ta, tb, first } => {
                engine.push_data((d(a), d(b)), d(c), move |_, (a, b), c| product(c, a, b, ta, tb, first)).unwrap()
            }
            Op::Relu { h } => engine.push_data((), d(h), |_, (), h| relu(h)).unwrap(),
            Op::Mask { h, dh } => engine.push_data(d(h), d(dh), |_, h, dh| mask(h, dh)).unwrap(),
        }
    }
    engine.wait_all().unwrap();
}

/// Tiles behind plain variables: how the untyped versions run an
/// operation on their tiles.
trait Tiles: Send + Sync + 'static {
    fn run(&self, op: Op);
}

/// Pushes the step on untyped variables, one per tile: the user declares
/// each operation's tiles, and nothing checks that the body uses only those.
fn untyped<S: Tiles>(engine: &Engine, ops: &[Op], tiles: &Arc<S>, vars: &[Vec<Var>]) {
    let v = |t: (M, usize, usize)| {
        let (m, i) = at(t);
        vars[m][i]
    };
    for &op in ops {
        let tiles = tiles.clone();
        let (reads, writes) = match op {
            Op::Product { c, a, b, .. } => (vec![v(a), v(b)], v(c)),
            Op::Relu { h } => (vec![], v(h)),
            Op::Mask { h, dh } => (vec![v(h)], v(dh)),
        };
        engine.push_sync(move |_| tiles.run(op), &reads, &[writes]).unwrap();
    }
    engine.wait_all().unwrap();
}

/// Tiles in `UnsafeCell`s: the user vouches for every access.
struct Cells(Vec<Vec<UnsafeCell<Tile>>>);
// SAFETY: every access goes through an operation that declares the tile's
// variable (read for `&`, write for `&mut`; `untyped`), and the engine
// orders them.
unsafe impl Sync for Cells {}

impl Tiles for Cells {
    fn run(&self, op: Op) {
        let tile = |t: (M, usize, usize)| {
            let (m, i) = at(t);
            self.0[m][i].get()
        };
        // SAFETY: each operation reads the tiles it declared as read and
        // writes the one it declared as written (`untyped`), which is
        // neither of the others.
        unsafe {
            match op {
                Op::Product { c, a, b, ta, tb, first } => product(&mut *tile(c), &*tile(a), &*tile(b), ta, tb, first),
                Op::Relu { h } => relu(&mut *tile(h)),
                Op::Mask { h, dh } => mask(&*tile(h), &mut *tile(dh)),
            }
        }
    }
}

/// Tiles behind mutexes: safe, and locked at every access although the
/// engine already orders them.
struct Locked(Vec<Vec<Mutex<Tile>>>);

impl Tiles for Locked {
    fn run(&self, op: Op) {
        let lock = |t: (M, usize, usize)| {
            let (m, i) = at(t);
            self.0[m][i].lock().unwrap()
        };
        match op {
            Op::Product { c, a, b, ta, tb, first } => product(&mut lock(c), &lock(a), &lock(b), ta, tb, first),
            Op::Relu { h } => relu(&mut lock(h)),
            Op::Mask { h, dh } => mask(&lock(h), &mut lock(dh)),
        }
    }
}

/// Rayon: one parallel pass over the output tiles per phase.
fn rayon_phases(g: &mut [Vec<Tile>]) {
    fn phase(g: &mut [Vec<Tile>], c: M, a: (M, bool), b: (M, bool)) {
        let mut out = std::mem::take(&mut g[c as usize]);
        out.par_iter_mut().enumerate().for_each(|(ij, tile)| {
            let (i, j) = (ij / TILES, ij % TILES);
            for k in 0..TILES {
                let ai = if a.1 { k * TILES + i } else { i * TILES + k };
                let bi = if b.1 { j * TILES + k } else { k * TILES + j };
                product(tile, &g[a.0 as usize][ai], &g[b.0 as usize][bi], a.1, b.1, k == 0);
            }
        });
        g[c as usize] = out;
    }
    phase(g, M::H, (M::X, false), (M::W1, false));
    g[M::H as usize].par_iter_mut().for_each(|h| relu(h));
    phase(g, M::Y, (M::H, false), (M::W2, false));
    phase(g, M::DW2, (M::H, true), (M::Y, false));
    phase(g, M::DH, (M::Y, false), (M::W2, true));
    let mut dh = std::mem::take(&mut g[M::DH as usize]);
    dh.par_iter_mut().zip(&g[M::H as usize]).for_each(|(d, h)| mask(h, d));
    g[M::DH as usize] = dh;
}

/// The outputs to compare: Y, dW2, dH.
fn outputs(g: &[Vec<Tile>]) -> [&Vec<Tile>; 3] {
    [&g[M::Y as usize], &g[M::DW2 as usize], &g[M::DH as usize]]
}

fn check(name: &str, got: &[Vec<Tile>], want: &[Vec<Tile>]) {
    assert!(outputs(got) == outputs(want), "{name}: the result differs from the serial run");
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let steps: usize = args.first().map_or(10, |s| s.parse().expect("STEPS: a number"));
    let kind = match args.get(1).map(String::as_str) {
        Some("pooled") => EngineKind::Pooled,
        Some("naive") => EngineKind::Naive,
        _ => EngineKind::PerDevice,
    };
    let engine = Engine::builder().kind(kind).build().unwrap();
    let ops = step_ops();
    assert_eq!(ops.len(), 2_176);
    let want = serial(&ops);

    // Each version's tiles, fresh from `initial` before each step.
    let fresh = || MATRICES.iter().map(|&m| initial(m)).collect::<Vec<_>>();
    let vars: Vec<Vec<Var>> = MATRICES.iter().map(|_| (0..TILES * TILES).map(|_| engine.new_var()).collect()).collect();
    let names = ["serial", "typed Data", "UnsafeCell", "Mutex", "rayon per phase"];
    let mut best = [f64::MAX; 5];
    let time = |f: &mut dyn FnMut()| {
        let start = Instant::now();
        f();
        start.elapsed().as_secs_f64() * 1e3
    };
    for step in 0..steps {
        // The versions take turns going first: side by side, in one run.
        for version in (0..names.len()).map(|i| (i + step) % names.len()) {
            let ms = match version {
                0 => time(&mut || drop(serial(&ops))),
                1 => {
                    let data: Vec<Vec<Data<Tile>>> =
                        fresh().into_iter().map(|m| m.into_iter().map(|t| engine.data(t)).collect()).collect();
                    let ms = time(&mut || typed(&engine, &ops, &data));
                    let got: Vec<Vec<Tile>> =
                        data.iter().map(|m| m.iter().map(|d| d.read().unwrap().clone()).collect()).collect();
                    check("typed", &got, &want);
                    drop(data);
                    engine.wait_all().unwrap(); // the tiles' deletions
                    ms
                }
                2 => {
                    let cells = fresh().into_iter().map(|m| m.into_iter().map(UnsafeCell::new).collect()).collect();
                    let cells = Arc::new(Cells(cells));
                    let ms = time(&mut || untyped(&engine, &ops, &cells, &vars));
                    let cells = Arc::into_inner(cells).expect("every operation has finished");
                    let got: Vec<Vec<Tile>> =
                        cells.0.into_iter().map(|m| m.into_iter().map(UnsafeCell::into_inner).collect()).collect();
                    check("UnsafeCell", &got, &want);
                    ms
                }
                3 => {
                    let tiles = fresh().into_iter().map(|m| m.into_iter().map(Mutex::new).collect()).collect();
                    let tiles = Arc::new(Locked(tiles));
                    let ms = time(&mut || untyped(&engine, &ops, &tiles, &vars));
                    let got: Vec<Vec<Tile>> =
                        tiles.0.iter().map(|m| m.iter().map(|t| t.lock().unwrap().clone()).collect()).collect();
                    check("Mutex", &got, &want);
                    ms
                }
                _ => {
                    let mut g = fresh();
                    let ms = time(&mut || rayon_phases(&mut g));
                    check("rayon", &g, &want);
                    ms
                }
            };
            best[version] = best[version].min(ms);
        }
    }
    println!(
        "tiled MLP step, {N}x{N} f32, {T}x{T} tiles, {} operations; engine {}, {} CPU workers; rayon {} threads",
        ops.len(),
        kind.name(),
        engine.cpu_workers(),
        rayon::current_num_threads()
    );
    println!("every version matched the serial result bit for bit; best of {steps} steps:");
    for (name, ms) in names.iter().zip(best) {
        println!("  {name:<16} {ms:8.2} ms/step   {:5.2}x typed", ms / best[1]);
    }
}
