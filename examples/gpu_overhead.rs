//! What a GPU operation costs on top of the kernel launch it makes (feature
//! `cuda`, needs a GPU):
//!
//! ```sh
//! cargo run --release --features cuda --example gpu_overhead
//! ```
//!
//! Launches an empty kernel `N` times: straight onto one stream (the
//! floor), then as `N` GPU operations of the default engine — a chain on
//! one variable (each waits for the one before, on whichever compute
//! stream it lands), and independent ones over 64 variables — each row
//! until every kernel has run (`wait_all`). Three rounds; the median.

use depengine::cudarc::driver::{CudaContext, CudaFunction, CudaStream, LaunchConfig};
use depengine::{Context, Engine, FnProperty, PushOpts};
use std::sync::Arc;
use std::time::Instant;

const N: usize = 20_000;

fn launch(f: &CudaFunction, stream: &CudaStream) {
    let mut b = stream.launch_builder(f);
    // SAFETY: the kernel takes no arguments and touches no memory.
    unsafe { b.launch(LaunchConfig { grid_dim: (1, 1, 1), block_dim: (32, 1, 1), shared_mem_bytes: 0 }) }
        .expect("kernel launch");
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() {
    let engine = Engine::global();
    if engine.gpus() == 0 {
        eprintln!("no GPU: {}", engine.gpu_info());
        std::process::exit(2);
    }
    println!("{}", engine.gpu_info());
    let ctx = CudaContext::new(0).expect("CUDA device 0");
    let ptx = depengine::cudarc::nvrtc::compile_ptx("extern \"C\" __global__ void nop() {}").expect("NVRTC");
    let nop = Arc::new(ctx.load_module(ptx).expect("module").load_function("nop").expect("kernel"));
    let stream = ctx.new_stream().expect("stream");
    let opts = PushOpts::new().ctx(Context::Gpu(0)).prop(FnProperty::Normal);
    let vars: Vec<_> = (0..64).map(|_| engine.new_var()).collect();

    let mut rows: Vec<(&str, Vec<f64>)> =
        vec![("one stream, no engine", vec![]), ("engine: chain", vec![]), ("engine: 64 independent", vec![])];
    for _round in 0..3 {
        let t = Instant::now();
        for _ in 0..N {
            launch(&nop, &stream);
        }
        stream.synchronize().unwrap();
        rows[0].1.push(t.elapsed().as_nanos() as f64 / N as f64);

        for (row, spread) in [(1, 1), (2, 64)] {
            let t = Instant::now();
            for i in 0..N {
                let f = nop.clone();
                let body = move |rc: &depengine::RunContext| launch(&f, rc.stream().expect("stream"));
                engine.push_sync_with(body, &[], &[vars[i % spread]], opts).unwrap();
            }
            engine.wait_all().unwrap();
            rows[row].1.push(t.elapsed().as_nanos() as f64 / N as f64);
        }
    }
    println!("{N} empty kernels, ns per kernel (median of 3 rounds)");
    for (name, v) in rows {
        println!("  {name:<24} {:>8.0}", median(v));
    }
    println!("{}", engine.stats());
}
