//! The GPU rings of every device, and the executor that routes GPU
//! operations to them and everything else to the CPU executor.
//!
//! Per device, three pools of worker threads (`WorkerPool`, the pooled
//! engine's spin-then-park pool, with its successor slot): the **compute**
//! ring (`gpu_compute_workers`, default 2), the **priority** ring for
//! `GpuPrioritized` (`gpu_priority_workers`, default 1, on streams of the
//! device's highest CUDA priority) and the **copy** ring for `CopyToGpu` /
//! `CopyFromGpu` (`gpu_copy_workers`, default 1). Each worker owns one lane
//! (`lane.rs`): its stream, which `RunContext::stream` hands to the body.
//!
//! A ring's queue never runs a GPU operation on a thread without its lane:
//! when it is full (65,536 ready operations), a worker of the ring runs the
//! operation itself and any other thread yields until there is room.

use crate::base::context::{Context, FnProperty};
use crate::base::error::EngineError;
use crate::exec::pooled::WorkerPool;
use crate::exec::{Executor, ExecutorTraits, Runner, WorkerThreads};
use crate::graph::gpu::fence::{Waiter, MAX_LANES};
use crate::graph::gpu::lane::Lane;
use crate::graph::opr::{Meta, OprBlock};
use crate::observe::stats::EngineStats;
use crate::sync::Ordering;
use cudarc::driver::{CudaContext, CudaStream, DriverError};
use std::cell::Cell;
use std::sync::Arc;
use std::time::Duration;

/// Ready operations one ring holds (see the module docs).
const RING_CAPACITY: usize = 1 << 16;

/// The rings a device has, in lane order (indices `COMPUTE`, `PRIORITY`,
/// `COPY`).
const RINGS: [&str; 3] = ["compute", "priority", "copy"];
const COMPUTE: usize = 0;
const PRIORITY: usize = 1;
const COPY: usize = 2;

crate::sync::thread_local! {
    /// The lane this thread owns (`usize::MAX`: none).
    static LANE: Cell<usize> = const { Cell::new(usize::MAX) };
}

/// GPU ring settings (the builder's `gpu_*_workers`).
#[derive(Debug, Clone, Copy)]
pub(crate) struct RingSizes {
    pub(crate) compute: usize,
    pub(crate) priority: usize,
    pub(crate) copy: usize,
}

struct DeviceRings {
    name: String,
    /// Compute, priority, copy (as [`RINGS`]).
    pools: [Arc<WorkerPool>; 3],
}

/// Every device's rings and lanes (empty when there is no GPU).
pub(crate) struct GpuRings {
    devices: Vec<DeviceRings>,
    /// All lanes, device by device, ring by ring, in worker id order.
    lanes: Vec<Lane>,
    /// Why there are no (more) devices, for the error of a GPU context
    /// naming one.
    why_not: String,
    first_worker_id: usize,
    threads: WorkerThreads,
}

impl GpuRings {
    /// Finds the devices (through the driver loaded at run time) and makes
    /// their lanes; ring workers get ids from `first_worker_id` on.
    pub(crate) fn new(sizes: RingSizes, spin: Duration, first_worker_id: usize) -> GpuRings {
        let mut rings = GpuRings {
            devices: Vec::new(),
            lanes: Vec::new(),
            why_not: String::new(),
            first_worker_id,
            threads: WorkerThreads::default(),
        };
        let count = match device_count() {
            Ok(n) => *n,
            Err(why) => {
                rings.why_not = why.clone();
                return rings;
            }
        };
        let per_device = sizes.compute + sizes.priority + sizes.copy;
        let fit = MAX_LANES / per_device.max(1);
        rings.why_not = format!("{count} CUDA device(s) found");
        for d in 0..count {
            if d >= fit {
                rings.why_not = format!(
                    "{count} CUDA device(s) found, but only {fit} fit in {MAX_LANES} streams at {per_device} per \
                     device (lower DEPENGINE_GPU_COMPUTE_WORKERS / _PRIORITY_ / _COPY_)"
                );
                break;
            }
            if let Err(e) = rings.add_device(d as u32, sizes, spin) {
                rings.why_not = format!("CUDA device {d} could not be set up ({e})");
                break;
            }
        }
        rings
    }

    fn add_device(&mut self, device: u32, sizes: RingSizes, spin: Duration) -> Result<(), DriverError> {
        let ctx = CudaContext::new(device as usize)?;
        let name = ctx.name().unwrap_or_else(|_| "?".into());
        // CUDA stream priorities: lower is more urgent; the range is (least, greatest).
        let (_, greatest) = cudarc::driver::result::stream::get_priority_range().unwrap_or((0, 0));
        let mut lanes = Vec::new();
        for (ring, n) in [sizes.compute, sizes.priority, sizes.copy].into_iter().enumerate() {
            let priority = (ring == PRIORITY).then_some(greatest);
            for index in 0..n {
                lanes.push(Lane::new((device, ring, index), &ctx, priority)?);
            }
        }
        let mut first = self.first_worker_id + self.lanes.len();
        let pools = [sizes.compute, sizes.priority, sizes.copy].map(|n| {
            let pool = Arc::new(WorkerPool::with_capacity(n, first, spin, RING_CAPACITY));
            first += n;
            pool
        });
        self.lanes.extend(lanes);
        self.devices.push(DeviceRings { name, pools });
        Ok(())
    }

    /// Devices with rings.
    pub(crate) fn devices(&self) -> usize {
        self.devices.len()
    }

    /// `gpu(id)` for each device, with its name and streams.
    pub(crate) fn describe(&self) -> String {
        if self.devices.is_empty() {
            return format!("no GPU rings: {}", self.why_not);
        }
        let each: Vec<String> = self
            .devices
            .iter()
            .enumerate()
            .map(|(d, r)| {
                let [c, p, k] = &r.pools;
                format!(
                    "gpu({d}) {}: {} compute, {} priority, {} copy streams",
                    r.name,
                    c.workers(),
                    p.workers(),
                    k.workers()
                )
            })
            .collect();
        each.join("; ")
    }

    /// Checks a GPU context names a device with rings.
    pub(crate) fn check_device(&self, id: u32) -> Result<(), EngineError> {
        if (id as usize) < self.devices.len() {
            Ok(())
        } else {
            Err(EngineError::NoSuchDevice(format!("gpu({id}): {}", self.why_not)))
        }
    }

    fn lane_workers(&self) -> usize {
        self.lanes.len()
    }

    /// The ring of device `device` that serves `prop`.
    fn pool(&self, device: u32, prop: FnProperty) -> &Arc<WorkerPool> {
        let ring = match prop {
            FnProperty::CopyToGpu | FnProperty::CopyFromGpu => COPY,
            FnProperty::GpuPrioritized => PRIORITY,
            _ => COMPUTE,
        };
        &self.devices[device as usize].pools[ring]
    }

    fn start<R: Runner>(self: &Arc<Self>, core: &Arc<R>) -> std::io::Result<()> {
        for (lane, l) in self.lanes.iter().enumerate() {
            let (core, pool) = (core.clone(), self.devices[l.device as usize].pools[l.ring].clone());
            let id = self.first_worker_id + lane;
            self.threads.spawn(format!("depengine-gpu{}-{}-{}", l.device, RINGS[l.ring], l.index), move || {
                LANE.with(|cell| cell.set(lane));
                pool.work(&*core, id);
            })?;
        }
        Ok(())
    }

    fn stop(&self) {
        for dev in &self.devices {
            dev.pools.iter().for_each(|p| p.tell_stop());
        }
        self.threads.join_all();
    }

    // ----- the scheduling rule on the device (see `fence.rs`) ---------------

    /// Before a body runs (once any GPU operation was scheduled,
    /// `Core::gpu_used`): a GPU operation on its lane makes the lane's
    /// stream wait for the GPU work it depends on, and gets the stream;
    /// anything else, on the host, blocks until that work is done.
    #[cold]
    pub(crate) fn before_body<R: Runner>(
        &self,
        core: &R,
        block: &OprBlock,
        meta: &Meta,
    ) -> Result<Option<Arc<CudaStream>>, DriverError> {
        let lane = LANE.with(|l| l.get());
        let on_lane = match meta.opts.ctx {
            Context::Gpu(d) => self.lanes.get(lane).filter(|l| l.device == d),
            Context::Cpu(_) => None,
        };
        let who = on_lane.map_or(Waiter::Host, |l| Waiter::Lane { id: lane, stream: &l.stream });
        // SAFETY: the runner owns the block and holds every access it lists.
        for d in unsafe { block.dep_slice() } {
            core.vars().get(d.slot()).gpu_fence().wait(&self.lanes, &who, d.writes())?;
        }
        Ok(on_lane.map(|l| {
            block.gpu_lane.store(lane as u32 + 1, Ordering::Relaxed);
            l.stream.clone()
        }))
    }

    /// When a GPU operation that ran on a lane completes (before anything
    /// is granted): records its seq and notes it on its variables.
    #[cold]
    pub(crate) fn on_complete<R: Runner>(&self, core: &R, block: &OprBlock) -> Result<(), DriverError> {
        let lane = block.gpu_lane.swap(0, Ordering::Relaxed);
        if lane == 0 {
            return Ok(());
        }
        let lane = lane as usize - 1;
        let seq = self.lanes[lane].record()?;
        // SAFETY: the completer owns the block and still holds its accesses.
        for d in unsafe { block.dep_slice() } {
            core.vars().get(d.slot()).gpu_fence().note(lane, seq, d.writes());
        }
        Ok(())
    }

    /// After `wait_var` / `wait_to_write`: blocks until the GPU work on the
    /// variable in slot `slot` is done.
    pub(crate) fn wait_var<R: Runner>(&self, core: &R, slot: u32, write: bool) -> Result<(), EngineError> {
        if !core.gpu_used().load(Ordering::Acquire) {
            return Ok(());
        }
        core.vars().get(slot).gpu_fence().wait(&self.lanes, &Waiter::Host, write).map_err(gpu_error)
    }

    /// After `wait_all` and at shutdown: blocks until every stream is idle.
    pub(crate) fn synchronize<R: Runner>(&self, core: &R) -> Result<(), EngineError> {
        if !core.gpu_used().load(Ordering::Acquire) {
            return Ok(());
        }
        self.lanes.iter().try_for_each(|l| l.synchronize()).map_err(gpu_error)
    }
}

/// The CUDA devices of this machine, or why there are none; looked up once
/// per process (loading the driver library is slow to fail).
fn device_count() -> &'static Result<usize, String> {
    static COUNT: std::sync::OnceLock<Result<usize, String>> = std::sync::OnceLock::new();
    COUNT.get_or_init(|| {
        // SAFETY: only tries to load the driver library; no CUDA call.
        if !unsafe { cudarc::driver::sys::is_culib_present() } {
            return Err("no CUDA driver (libcuda could not be loaded)".into());
        }
        CudaContext::device_count()
            .map(|n| n.max(0) as usize)
            .map_err(|e| format!("the CUDA driver could not list devices ({e})"))
    })
}

/// A failed CUDA call, as the engine reports it.
fn gpu_error(e: DriverError) -> EngineError {
    EngineError::Gpu(format!("CUDA: {e}"))
}

/// The CPU executor plus the GPU rings (see the module docs).
pub(crate) struct GpuExecutor<R> {
    cpu: Box<dyn Executor<R>>,
    /// The CPU executor's worker threads: the lanes' ids follow them.
    cpu_threads: usize,
    rings: Arc<GpuRings>,
}

impl<R: Runner> GpuExecutor<R> {
    /// Routes GPU operations of `rings`' devices to them, the rest to `cpu`.
    pub(crate) fn new(cpu: Box<dyn Executor<R>>, rings: Arc<GpuRings>) -> Self {
        GpuExecutor { cpu_threads: cpu.traits().worker_threads, cpu, rings }
    }
}

impl<R: Runner> Executor<R> for GpuExecutor<R> {
    fn start(&self, core: &Arc<R>) -> std::io::Result<()> {
        self.cpu.start(core)?;
        self.rings.start(core)
    }

    fn schedule(&self, core: &R, op: u32, prop: FnProperty) {
        // SAFETY: a ready block's `meta` is read-only for its scheduler.
        match unsafe { core.oprs().get(op).meta().opts.ctx } {
            Context::Gpu(d) => {
                if !core.gpu_used().load(Ordering::Relaxed) {
                    core.gpu_used().store(true, Ordering::Relaxed);
                }
                self.rings.pool(d, prop).schedule_here(core, op);
            }
            Context::Cpu(_) => self.cpu.schedule(core, op, prop),
        }
    }

    fn help(&self, core: &R) -> bool {
        self.cpu.help(core)
    }

    fn stop(&self) {
        self.rings.stop();
        self.cpu.stop();
    }

    fn traits(&self) -> ExecutorTraits {
        // The CPU executor's, whole: the rings add only their lanes.
        let cpu = self.cpu.traits();
        ExecutorTraits { worker_threads: cpu.worker_threads + self.rings.lane_workers(), ..cpu }
    }

    fn worker_name(&self, id: usize) -> String {
        let Some(lane) = id.checked_sub(self.cpu_threads) else {
            return self.cpu.worker_name(id);
        };
        match self.rings.lanes.get(lane) {
            Some(l) => format!("gpu({}) {} stream {}", l.device, RINGS[l.ring], l.index),
            None => format!("worker {id}"),
        }
    }

    fn add_stats(&self, s: &mut EngineStats) {
        self.cpu.add_stats(s);
        for dev in &self.rings.devices {
            dev.pools.iter().for_each(|p| p.add_stats(s));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::exec::WorkerState;
    use crate::graph::var::Variables;
    use crate::mem::pool::Pool;
    use crate::observe::profiler::Profiler;
    use crate::sync::AtomicBool;
    use std::sync::atomic::AtomicUsize;

    /// A CPU executor whose every trait differs from `run_by_waiters`.
    struct Contrary;

    /// A runner the test never runs anything on.
    struct NoRunner;

    impl Runner for NoRunner {
        fn run(&self, _op: u32, _worker: Option<usize>) {
            unreachable!("nothing runs in this test")
        }
        fn enter_worker(&self) {}
        fn flush_worker_batch(&self) {}
        fn leave_worker(&self) {}
        fn in_own_body(&self) -> bool {
            false
        }
        fn oprs(&self) -> &Pool<OprBlock> {
            unreachable!("nothing is scheduled in this test")
        }
        fn profiler(&self) -> &Profiler {
            unreachable!("no worker starts in this test")
        }
        fn vars(&self) -> &Variables {
            unreachable!("no variable is used in this test")
        }
        fn gpu_used(&self) -> &AtomicBool {
            unreachable!("nothing is scheduled in this test")
        }
    }

    static NOTED: AtomicUsize = AtomicUsize::new(0);

    struct ContraryWorkers;

    impl WorkerState for ContraryWorkers {
        fn movable_workers_fill_cpus(&self) -> bool {
            true
        }
        fn note_throttled_pusher(&self) {
            NOTED.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
    }

    impl<R: Runner> Executor<R> for Contrary {
        fn start(&self, _core: &Arc<R>) -> std::io::Result<()> {
            Ok(())
        }
        fn schedule(&self, _core: &R, _op: u32, _prop: FnProperty) {
            unreachable!("not scheduled in this test")
        }
        fn help(&self, _core: &R) -> bool {
            false
        }
        fn stop(&self) {}
        fn traits(&self) -> ExecutorTraits {
            ExecutorTraits {
                cpu_workers: 3,
                worker_threads: 4,
                waiters_can_sleep: false,
                runs_async_inline: true,
                runs_on_pushers: true,
                throttled_pushers_help: false,
                workers: Some(Arc::new(ContraryWorkers)),
            }
        }
        fn worker_name(&self, id: usize) -> String {
            format!("contrary {id}")
        }
        fn add_stats(&self, _stats: &mut EngineStats) {}
    }

    /// The GPU executor has the traits of the CPU executor it wraps, plus
    /// its lanes' threads. Two it once did not pass on took a default on
    /// every machine with a GPU: `movable_workers_fill_cpus` (until
    /// 2026-11-27) and `note_throttled_pusher` (per_device's tracking of
    /// the pusher's CPU was off).
    #[test]
    fn the_gpu_executor_has_the_cpu_executors_traits() {
        let rings = Arc::new(GpuRings::new(RingSizes { compute: 1, priority: 1, copy: 1 }, Duration::ZERO, 4));
        let lanes = rings.lane_workers();
        let gpu = GpuExecutor::<NoRunner>::new(Box::new(Contrary), rings).traits();
        let cpu = <Contrary as Executor<NoRunner>>::traits(&Contrary);
        assert_eq!(gpu.waiters_can_sleep, cpu.waiters_can_sleep, "waiters_can_sleep");
        assert_eq!(gpu.cpu_workers, cpu.cpu_workers, "cpu_workers");
        assert_eq!(gpu.worker_threads, cpu.worker_threads + lanes, "worker_threads");
        assert_eq!(gpu.runs_async_inline, cpu.runs_async_inline, "runs_async_inline");
        assert_eq!(gpu.throttled_pushers_help, cpu.throttled_pushers_help, "throttled_pushers_help");
        assert_eq!(gpu.runs_on_pushers, cpu.runs_on_pushers, "runs_on_pushers");
        assert!(gpu.movable_workers_fill_cpus(), "movable_workers_fill_cpus");
        gpu.note_throttled_pusher();
        assert_eq!(NOTED.load(std::sync::atomic::Ordering::Relaxed), 1, "note_throttled_pusher not passed on");
    }
}
