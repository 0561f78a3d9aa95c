export LD_LIBRARY_PATH=$PWD/target/device; B=target/device/depengine-perf
d() { echo "=== $*"; timeout 60 $B --no-probe --stats --reps 3 "$@" 2>&1 | grep -v "^machine state\|^push-path\|^per_device topology"; }
for t in 2 4 8 15; do d --engines per_device --workloads nodeps,chains64,random,layered --w 0 --threads $t; done
for t in 8 15; do d --engines per_device --workloads nodeps,random --w 1000 --threads $t; done
d --engines per_device --workloads random,chains64 --w 0,1000 --threads 15 --no-pin
d --engines per_device --workloads random --w 0,1000 --threads 14
for p in 1 8; do d --engines per_device,per_device+pusher --workloads nodeps,chains64 --w 0 --threads 8 --pushers $p; done
