export LD_LIBRARY_PATH=$PWD/target/device; B=target/device/depengine-perf
st() { awk '/^cpu /{print "user",$2,"sys",$4,"idle",$5,"steal",$9; exit}' /proc/stat; grep -E "^(ctxt|intr)" /proc/stat | cut -c1-30; }
d() { echo "=== $*"; st; timeout 60 "$@" 2>&1 | grep -E "^per_device|workers:|ops:" | cut -c1-400; st; }
R="--no-probe --stats --reps 3 --engines per_device --workloads random --w 1000"
d $B $R --threads 15
d $B $R --threads 14
d $B $R --threads 15 --spin-us 0
d $B $R --threads 14 --spin-us 0
d taskset -c 0-14 $B $R --threads 14
d $B $R --threads 12
d $B --no-probe --stats --reps 3 --engines per_device --workloads random,chains64 --w 0 --threads 15 --spin-us 0
d $B --no-probe --stats --reps 3 --engines per_device --workloads random,chains64 --w 0 --threads 2 --spin-us 0
ps -eLo comm,psr,pcpu | sort -k3 -rn | head -15
nproc; cat /sys/fs/cgroup/cpu.max 2>/dev/null
