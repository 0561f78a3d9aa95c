//! GPU rings (feature `cuda`).
//!
//! These tests need a CUDA GPU and are ignored by default (CI has none;
//! `tests/errors.rs` checks the error a GPU context gets there). On a
//! machine with one:
//!
//! ```sh
//! cargo test --release --features cuda --test gpu -- --ignored --test-threads 1
//! ```
//!
//! (NVRTC compiles the kernels at run time: `libnvrtc.so` must be on the
//! loader's path, e.g. `LD_LIBRARY_PATH=/usr/local/cuda/lib64`.)
//!
//! The kernels work on raw device pointers, so cudarc's own stream
//! tracking plays no part: every ordering between streams seen here is the
//! engine's.
#![cfg(feature = "cuda")]

use depengine::cudarc::driver::{result, CudaContext, CudaFunction, CudaStream, LaunchConfig, PushKernelArg};
use depengine::{Context, Engine, EngineKind, FnProperty, PushOpts, RunContext};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

const KERNELS: &str = r#"
extern "C" __global__ void saxpy(float a, const float* x, float* y, unsigned int n) {
    unsigned int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = a * x[i] + y[i];
}

// dst = dst * 3 + src, `reps` times: order-sensitive, and slow enough that a
// missing wait between streams shows.
extern "C" __global__ void step(unsigned int* dst, const unsigned int* src, unsigned int n, unsigned int reps) {
    unsigned int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        unsigned int d = dst[i], s = src[i];
        #pragma unroll 1
        for (unsigned int r = 0; r < reps; r++) d = d * 3u + s;
        dst[i] = d;
    }
}

// Spins for `cycles` clock cycles, then fills dst with `value`.
extern "C" __global__ void spin_fill(unsigned int* dst, unsigned int n, unsigned int value, long long cycles) {
    long long start = clock64();
    while (clock64() - start < cycles) {}
    unsigned int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) dst[i] = value;
}
"#;

/// The device and the compiled kernels.
struct Gpu {
    ctx: Arc<CudaContext>,
    saxpy: CudaFunction,
    step: CudaFunction,
    spin_fill: CudaFunction,
}

impl Gpu {
    fn new() -> Gpu {
        let ctx = CudaContext::new(0).expect("CUDA device 0");
        let ptx = depengine::cudarc::nvrtc::compile_ptx(KERNELS).expect("NVRTC compiles the kernels");
        let module = ctx.load_module(ptx).expect("module loads");
        let f = |name: &str| module.load_function(name).expect("kernel");
        Gpu { saxpy: f("saxpy"), step: f("step"), spin_fill: f("spin_fill"), ctx }
    }

    /// A device buffer of `n` elements of 4 bytes, freed at drop.
    fn buffer(&self, n: usize) -> DevBuf {
        self.ctx.bind_to_thread().unwrap();
        // SAFETY: a plain allocation on the bound context.
        let ptr = unsafe { result::malloc_sync(n * 4) }.expect("cuMemAlloc");
        DevBuf { ctx: self.ctx.clone(), ptr, n }
    }
}

struct DevBuf {
    ctx: Arc<CudaContext>,
    ptr: u64,
    n: usize,
}

impl DevBuf {
    fn upload<T: Copy>(&self, data: &[T], stream: &CudaStream) {
        assert_eq!(std::mem::size_of_val(data), self.n * 4);
        // SAFETY: `data` has the buffer's size; pageable memory is staged
        // before the call returns.
        unsafe { result::memcpy_htod_async(self.ptr, data, stream.cu_stream()) }.expect("upload");
    }

    /// Copies the buffer to the host with a synchronous copy on the legacy
    /// stream, which does not wait for the engine's (non-blocking) streams:
    /// only the engine's own waits make the data current.
    fn read_now<T: Copy + Default>(&self) -> Vec<T> {
        self.ctx.bind_to_thread().unwrap();
        let mut out = vec![T::default(); self.n * 4 / std::mem::size_of::<T>()];
        // SAFETY: `out` has the buffer's size.
        unsafe { result::memcpy_dtoh_sync(&mut out, self.ptr) }.expect("download");
        out
    }
}

impl Drop for DevBuf {
    fn drop(&mut self) {
        self.ctx.bind_to_thread().unwrap();
        // SAFETY: allocated by `Gpu::buffer`; the engines waited for all work.
        unsafe { result::free_sync(self.ptr) }.unwrap();
    }
}

fn stream(rc: &RunContext) -> &Arc<CudaStream> {
    rc.stream().expect("a GPU operation runs with its lane's stream")
}

/// Launches kernel `f` on `stream` over `n` elements with the arguments.
macro_rules! launch {
    ($f:expr, $stream:expr, $n:expr; $($arg:expr),*) => {{
        let mut b = $stream.launch_builder($f);
        $(let arg = $arg; b.arg(&arg);)*
        // SAFETY: every kernel here bounds-checks against its `n` argument.
        unsafe { b.launch(LaunchConfig::for_num_elems($n as u32)) }.expect("kernel launch");
    }};
}

fn gpu_engine(kind: EngineKind) -> Engine {
    let engine = Engine::builder().kind(kind).cpu_workers(2).build().unwrap();
    assert!(engine.gpus() > 0, "this test needs a CUDA GPU: {}", engine.gpu_info());
    engine
}

fn on_gpu(prop: FnProperty) -> PushOpts {
    PushOpts::new().ctx(Context::Gpu(0)).prop(prop)
}

/// Copies in on the copy ring, ten saxpys spread over the compute ring's
/// two streams (one of them asynchronous, signalled from another thread),
/// one on the priority ring, a copy out on the copy ring and a CPU check:
/// y = y0 + 10·2·x − x.
#[test]
#[ignore = "needs a CUDA GPU"]
fn saxpy_across_the_rings_in_push_order() {
    let gpu = Arc::new(Gpu::new());
    for kind in EngineKind::ALL {
        let engine = gpu_engine(kind);
        const N: usize = 1 << 20;
        let (dx, dy) = (Arc::new(gpu.buffer(N)), Arc::new(gpu.buffer(N)));
        let x: Arc<Vec<f32>> = Arc::new((0..N).map(|i| (i % 97) as f32).collect());
        let y0: Arc<Vec<f32>> = Arc::new((0..N).map(|i| (i % 13) as f32).collect());
        let (vx, vy, vh) = (engine.new_var(), engine.new_var(), engine.new_var());
        let lanes = Arc::new(Mutex::new(Vec::new()));

        for (buf, host, var) in [(dx.clone(), x.clone(), vx), (dy.clone(), y0.clone(), vy)] {
            let l = lanes.clone();
            engine
                .push_sync_with(
                    move |rc| {
                        l.lock().unwrap().push(("copy", rc.worker()));
                        buf.upload(&host, stream(rc));
                    },
                    &[],
                    &[var],
                    on_gpu(FnProperty::CopyToGpu),
                )
                .unwrap();
        }
        for i in 0..10 {
            let (g, px, py, l) = (gpu.clone(), dx.ptr, dy.ptr, lanes.clone());
            let body = move |rc: &RunContext| {
                l.lock().unwrap().push(("compute", rc.worker()));
                launch!(&g.saxpy, stream(rc), N; 2.0f32, px, py, N as u32);
            };
            if i == 5 {
                engine
                    .push_async_with(
                        move |rc, done| {
                            body(rc);
                            std::thread::spawn(move || {
                                std::thread::sleep(std::time::Duration::from_millis(5));
                                done.signal();
                            });
                        },
                        &[vx],
                        &[vy],
                        on_gpu(FnProperty::Normal),
                    )
                    .unwrap();
            } else {
                engine.push_sync_with(body, &[vx], &[vy], on_gpu(FnProperty::Normal)).unwrap();
            }
        }
        let (g, px, py, l) = (gpu.clone(), dx.ptr, dy.ptr, lanes.clone());
        engine
            .push_sync_with(
                move |rc| {
                    l.lock().unwrap().push(("priority", rc.worker()));
                    launch!(&g.saxpy, stream(rc), N; -1.0f32, px, py, N as u32);
                },
                &[vx],
                &[vy],
                on_gpu(FnProperty::GpuPrioritized),
            )
            .unwrap();
        let out = Arc::new(Mutex::new(vec![0f32; N]));
        let (o, py, l) = (out.clone(), dy.ptr, lanes.clone());
        engine
            .push_sync_with(
                move |rc| {
                    l.lock().unwrap().push(("copy out", rc.worker()));
                    let mut host = o.lock().unwrap();
                    // SAFETY: `host` has N elements, like the buffer.
                    unsafe { result::memcpy_dtoh_async(&mut host[..], py, stream(rc).cu_stream()) }.unwrap();
                },
                &[vy],
                &[vh],
                on_gpu(FnProperty::CopyFromGpu),
            )
            .unwrap();
        let checked = Arc::new(AtomicBool::new(false));
        let (o, c, x2, y2) = (out.clone(), checked.clone(), x.clone(), y0.clone());
        engine
            .push_sync(
                move |_| {
                    let host = o.lock().unwrap();
                    for i in 0..N {
                        assert_eq!(host[i], y2[i] + 19.0 * x2[i], "{kind:?}: y[{i}]");
                    }
                    c.store(true, Ordering::SeqCst);
                },
                &[vh],
                &[],
            )
            .unwrap();
        engine.wait_all().unwrap();
        assert!(checked.load(Ordering::SeqCst), "{kind:?}: the CPU check ran and passed");
        let y: Vec<f32> = dy.read_now();
        assert!((0..N).all(|i| y[i] == y0[i] + 19.0 * x[i]), "{kind:?}: the device buffer after wait_all");
        let lanes = lanes.lock().unwrap();
        let workers = |what: &str| {
            let mut w: Vec<_> = lanes.iter().filter(|(k, _)| *k == what).map(|(_, w)| w.unwrap()).collect();
            w.sort();
            w.dedup();
            w
        };
        assert_eq!(workers("copy"), workers("copy out"), "{kind:?}: one copy stream");
        let (compute, priority, copy) = (workers("compute"), workers("priority"), workers("copy"));
        assert!(compute.iter().all(|w| !priority.contains(w) && !copy.contains(w)), "{kind:?}: {lanes:?}");
        assert!(priority.iter().all(|w| !copy.contains(w)), "{kind:?}: separate rings {lanes:?}");
        println!("{kind:?}: {} — compute workers {compute:?}", engine.gpu_info());
    }
}

/// The first kernel spins for ~0.2 s; the operation that reads its output
/// runs on another ring's stream. Its body must start while the first
/// kernel is still running (the engine did not wait on the host), and its
/// kernel must still see the first one's output (it waited on the device).
#[test]
#[ignore = "needs a CUDA GPU"]
fn a_dependent_on_another_stream_waits_on_the_device_not_the_host() {
    let gpu = Arc::new(Gpu::new());
    let engine = gpu_engine(EngineKind::PerDevice);
    const N: usize = 1 << 16;
    let (a, b) = (Arc::new(gpu.buffer(N)), Arc::new(gpu.buffer(N)));
    b.upload(&vec![0u32; N], &gpu.ctx.default_stream());
    gpu.ctx.synchronize().unwrap();
    let (va, vb) = (engine.new_var(), engine.new_var());
    let first_done = Arc::new(Mutex::new(None));
    let (g, pa, fd) = (gpu.clone(), a.ptr, first_done.clone());
    engine
        .push_sync_with(
            move |rc| {
                let s = stream(rc);
                launch!(&g.spin_fill, s, N; pa, N as u32, 7u32, 400_000_000i64);
                *fd.lock().unwrap() = Some(s.record_event(None).unwrap());
            },
            &[],
            &[va],
            on_gpu(FnProperty::Normal),
        )
        .unwrap();
    let overlapped = Arc::new(AtomicBool::new(false));
    let (g, pa, pb, fd, ov) = (gpu.clone(), a.ptr, b.ptr, first_done.clone(), overlapped.clone());
    engine
        .push_sync_with(
            move |rc| {
                let first = fd.lock().unwrap().take().expect("the first body ran before this one");
                ov.store(!first.is_complete(), Ordering::SeqCst);
                launch!(&g.step, stream(rc), N; pb, pa, N as u32, 1u32);
            },
            &[va],
            &[vb],
            on_gpu(FnProperty::GpuPrioritized),
        )
        .unwrap();
    engine.wait_var(vb).unwrap();
    let got: Vec<u32> = b.read_now();
    assert!(got.iter().all(|&v| v == 7), "the dependent kernel saw the first one's output: {:?}", &got[..4]);
    assert!(overlapped.load(Ordering::SeqCst), "the dependent body started while the first kernel still ran");
}

/// A random program of order-sensitive kernels, device-to-device copies
/// and CPU reads over six buffers, on every ring, checked against a
/// sequential replay on the host: every value read and every final value.
#[test]
#[ignore = "needs a CUDA GPU"]
fn random_kernels_on_every_ring_match_a_sequential_replay() {
    let gpu = Arc::new(Gpu::new());
    const N: usize = 1 << 18;
    const BUFS: usize = 6;
    // Each kernel takes ~0.1 ms: long enough for a missing wait to show.
    const REPS: u32 = 1 << 16;
    // The host replays `REPS` steps at once: d·3^REPS + s·(3^0 + … + 3^(REPS−1)).
    let (pow, sum) = (0..REPS).fold((1u32, 0u32), |(p, s), _| (p.wrapping_mul(3), s.wrapping_add(p)));
    for kind in EngineKind::ALL {
        let engine = gpu_engine(kind);
        let bufs: Vec<Arc<DevBuf>> = (0..BUFS).map(|_| Arc::new(gpu.buffer(N))).collect();
        let mut host: Vec<Vec<u32>> =
            (0..BUFS).map(|j| (0..N as u32).map(|i| i ^ (j as u32 * 0x9e37)).collect()).collect();
        let init = gpu.ctx.default_stream();
        for (b, h) in bufs.iter().zip(&host) {
            b.upload(h, &init);
        }
        gpu.ctx.synchronize().unwrap();
        let vars: Vec<_> = (0..BUFS).map(|_| engine.new_var()).collect();
        let seen = Arc::new(Mutex::new(Vec::new()));
        let mut expected = Vec::new();
        let mut rng = 0x2545_f491_4f6c_dd1du64 ^ kind as u64;
        let mut next = |m: usize| {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            (rng % m as u64) as usize
        };
        for op in 0..300 {
            let dst = next(BUFS);
            let src = (dst + 1 + next(BUFS - 1)) % BUFS;
            let (pd, ps) = (bufs[dst].ptr, bufs[src].ptr);
            match next(8) {
                0 | 1 => {
                    // A CPU operation reads `src` (host wait on its GPU work).
                    let (b, s) = (bufs[src].clone(), seen.clone());
                    engine
                        .push_sync(move |_| s.lock().unwrap().push((op, b.read_now::<u32>())), &[vars[src]], &[])
                        .unwrap();
                    expected.push((op, host[src].clone()));
                }
                2 => {
                    // A device-to-device copy on the copy ring.
                    engine
                        .push_sync_with(
                            move |rc| {
                                // SAFETY: both buffers hold N elements.
                                unsafe { result::memcpy_dtod_async(pd, ps, N * 4, stream(rc).cu_stream()) }.unwrap()
                            },
                            &[vars[src]],
                            &[vars[dst]],
                            on_gpu(FnProperty::CopyToGpu),
                        )
                        .unwrap();
                    host[dst] = host[src].clone();
                }
                r => {
                    let prop = if r == 3 { FnProperty::GpuPrioritized } else { FnProperty::Normal };
                    let g = gpu.clone();
                    engine
                        .push_sync_with(
                            move |rc| launch!(&g.step, stream(rc), N; pd, ps, N as u32, REPS),
                            &[vars[src]],
                            &[vars[dst]],
                            on_gpu(prop),
                        )
                        .unwrap();
                    let (s, d) = (host[src].clone(), &mut host[dst]);
                    for (d, s) in d.iter_mut().zip(s) {
                        *d = d.wrapping_mul(pow).wrapping_add(s.wrapping_mul(sum));
                    }
                }
            }
        }
        engine.wait_all().unwrap();
        let mut seen = std::mem::take(&mut *seen.lock().unwrap());
        seen.sort_by_key(|(op, _)| *op);
        assert_eq!(seen.len(), expected.len(), "{kind:?}");
        for ((op, got), (_, want)) in seen.iter().zip(&expected) {
            assert!(got == want, "{kind:?}: the CPU read of op {op} saw other values");
        }
        for (j, b) in bufs.iter().enumerate() {
            assert!(b.read_now::<u32>() == host[j], "{kind:?}: buffer {j} after wait_all");
        }
        let stats = engine.stats();
        println!("{kind:?}: {} reads checked, {stats}", expected.len());
    }
}

/// Typed data holding device buffers: the bodies get the buffers and their
/// lane's stream; a host datum filled by a copy from the device is current
/// when its read guard is granted (the guard waits for the stream's work).
#[test]
#[ignore = "needs a CUDA GPU"]
fn typed_device_buffers_follow_the_push_order() {
    let gpu = Arc::new(Gpu::new());
    for kind in EngineKind::ALL {
        let engine = gpu_engine(kind);
        const N: usize = 1 << 20;
        let x: Arc<Vec<f32>> = Arc::new((0..N).map(|i| (i % 97) as f32).collect());
        let (dx, dy) = (engine.data(gpu.buffer(N)), engine.data(gpu.buffer(N)));
        let host = engine.data(vec![0f32; N]);
        let xs = x.clone();
        let upload = move |rc: &RunContext, (), (dx, dy): (&mut DevBuf, &mut DevBuf)| {
            dx.upload(&xs, stream(rc));
            dy.upload(&vec![1f32; N], stream(rc));
        };
        engine.push_data_with((), (&dx, &dy), on_gpu(FnProperty::CopyToGpu), upload).unwrap();
        for _ in 0..10 {
            let g = gpu.clone();
            let saxpy = move |rc: &RunContext, dx: &DevBuf, dy: &mut DevBuf| {
                launch!(&g.saxpy, stream(rc), N; 2.0f32, dx.ptr, dy.ptr, N as u32);
            };
            engine.push_data_with(&dx, &dy, on_gpu(FnProperty::Normal), saxpy).unwrap();
        }
        let download = |rc: &RunContext, dy: &DevBuf, host: &mut Vec<f32>| {
            // SAFETY: `host` has the buffer's size and stays borrowed by
            // this operation until its stream work is done (the engine
            // records it and later accesses wait for it).
            unsafe { result::memcpy_dtoh_async(host.as_mut_slice(), dy.ptr, stream(rc).cu_stream()) }
                .expect("download");
        };
        engine.push_data_with(&dy, &host, on_gpu(FnProperty::CopyFromGpu), download).unwrap();
        let got = host.read().unwrap();
        for (i, (g, x)) in got.iter().zip(x.iter()).enumerate() {
            assert_eq!(*g, 1.0 + 20.0 * x, "{kind:?}: element {i}");
        }
    }
}
