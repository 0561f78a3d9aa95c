export LD_LIBRARY_PATH=$PWD/target/device; D=target/device
d() { v=$1; shift; echo "=== $v $*"; timeout 40 $D/depengine-perf$v --no-probe --stats --reps 3 --engines per_device --workloads random,layered,chains64,nodeps --w 0,1000 "$@" 2>&1 | grep -E "^per_device|workers:" | cut -c1-160; }
for round in 1 2; do for t in 4 8 15; do d "" --threads $t; d -allspin --threads $t; done; done
d "" --threads 15 --spin-us 200
d -allspin --threads 15 --spin-us 200
