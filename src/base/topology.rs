//! The machine as the per_device engine sees it: the CPUs this process may
//! run on, and the NUMA node of each.
//!
//! With the `hwloc` feature the nodes come from hwloc (each allowed
//! processing unit's nodeset; hwloc 2 panics when asked for NUMANode
//! objects directly, so they are never listed). Without it, or when hwloc
//! cannot load the topology, every allowed CPU (`core_affinity`, which
//! honours the process's affinity mask) is put on one node.
//! [`Topology::source`] says which was used.

use std::fmt;

/// Where the topology came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum TopologySource {
    /// hwloc (the `hwloc` feature).
    Hwloc,
    /// `core_affinity`'s list of allowed CPUs, as one NUMA node.
    CoreAffinity,
    /// Neither could list the CPUs: one unpinnable CPU.
    Unknown,
}

/// One CPU this process may run on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cpu {
    /// The operating system's CPU number (what `sched_getcpu` returns).
    pub os_index: usize,
    /// The NUMA node it belongs to (dense: `0..Topology::nodes`).
    pub node: usize,
}

/// The CPUs and NUMA nodes ([`Engine::topology`](crate::Engine::topology)).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Topology {
    /// Allowed CPUs, by node and then by OS number.
    pub cpus: Vec<Cpu>,
    /// NUMA nodes (at least 1).
    pub nodes: usize,
    /// Where this came from.
    pub source: TopologySource,
}

impl Topology {
    /// Reads the topology: hwloc where built in and working, else
    /// `core_affinity`.
    pub fn detect() -> Topology {
        #[cfg(feature = "hwloc")]
        if let Some(t) = Self::from_hwloc() {
            return t;
        }
        Self::from_core_affinity()
    }

    /// Every allowed CPU on one node.
    pub fn from_core_affinity() -> Topology {
        let mut ids: Vec<usize> = core_affinity::get_core_ids().unwrap_or_default().iter().map(|c| c.id).collect();
        ids.sort_unstable();
        if ids.is_empty() {
            return Topology { cpus: vec![Cpu { os_index: 0, node: 0 }], nodes: 1, source: TopologySource::Unknown };
        }
        Topology {
            cpus: ids.into_iter().map(|os_index| Cpu { os_index, node: 0 }).collect(),
            nodes: 1,
            source: TopologySource::CoreAffinity,
        }
    }

    /// The allowed CPUs with their nodes from hwloc.
    #[cfg(feature = "hwloc")]
    fn from_hwloc() -> Option<Topology> {
        use hwloc2::ObjectType;
        let allowed: Vec<usize> = core_affinity::get_core_ids()?.iter().map(|c| c.id).collect();
        let topo = hwloc2::Topology::new()?;
        let pus = topo.objects_with_type(&ObjectType::PU).ok()?;
        let mut node_ids: Vec<i32> = Vec::new();
        let mut cpus = Vec::new();
        for pu in pus {
            let os_index = pu.os_index() as usize;
            if !allowed.contains(&os_index) {
                continue;
            }
            let node_os = pu.nodeset().map_or(0, |set| set.first().max(0));
            let node = match node_ids.iter().position(|&n| n == node_os) {
                Some(i) => i,
                None => {
                    node_ids.push(node_os);
                    node_ids.len() - 1
                }
            };
            cpus.push(Cpu { os_index, node });
        }
        if cpus.is_empty() {
            return None;
        }
        cpus.sort_by_key(|c| (c.node, c.os_index));
        Some(Topology { cpus, nodes: node_ids.len().max(1), source: TopologySource::Hwloc })
    }

    /// The node of OS CPU `os_index` (node 0 if it is not an allowed CPU).
    pub fn node_of(&self, os_index: usize) -> usize {
        self.cpus.iter().find(|c| c.os_index == os_index).map_or(0, |c| c.node)
    }
}

/// The OS CPU the calling thread runs on now (`sched_getcpu`, which reads
/// the kernel's `rseq` area: about 2 ns); `None` if the kernel cannot say.
pub(crate) fn current_cpu() -> Option<usize> {
    // SAFETY: `sched_getcpu` has no preconditions; −1 means unknown.
    let cpu = unsafe { libc::sched_getcpu() };
    usize::try_from(cpu).ok()
}

impl fmt::Display for Topology {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let source = match self.source {
            TopologySource::Hwloc => "hwloc",
            TopologySource::CoreAffinity => "core_affinity, one node assumed",
            TopologySource::Unknown => "unknown: no CPU list",
        };
        let plural = if self.nodes == 1 { "" } else { "s" };
        write!(f, "{} CPUs on {} NUMA node{plural} (from {source})", self.cpus.len(), self.nodes)
    }
}

/// The CPUs this process may use (its affinity and quota; 1 if unknown):
/// the default CPU worker count.
pub(crate) fn available_cpus() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}
