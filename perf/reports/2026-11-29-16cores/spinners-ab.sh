export LD_LIBRARY_PATH=$PWD/target/device; D=target/device
ab() { for round in 1 2; do for t in 8 15; do for v in base new; do echo "=== $v --threads $t"
  $D/depengine-perf-$v --no-probe --stats --reps 3 --engines per_device --workloads random,layered,chains64,nodeps --w 0,1000 --threads $t 2>&1 | grep -E "^per_device |workers:" | cut -c1-120; done; done; done; }
timeout 100 bash -c "$(declare -f ab); D=$D; ab" > $OUT/ab.txt 2>&1
BIN=$D/depengine-perf-new OUT_DIR=/tmp/sc ENGINES=per_device,per_device+pusher WORKLOADS=nodeps,chains64,random,layered WORKERS=2,4,8,15 PUSHERS=1,8 timeout 130 perf/scaling.sh > $OUT/scaling.log 2>&1
tar czf $OUT/scaling.tgz -C /tmp sc; cp /tmp/sc/scaling.md $OUT/ 2>/dev/null; echo done
