# Issue 20's two-GPU figure in one device call on a machine with two GPUs (kind nvidia-h200-x2,
# ~6 min): builds headroom with CUDA and hiredis, then scripts/queue-throughput.sh runs a batch of
# SD1.5 512x512 jobs (random full-size f16 weights) through Redis Streams on one worker (cuda:0)
# and on two (cuda:0, cuda:1) and prints jobs per minute and the speed-up.
#
# The GPU machine has neither Redis nor hiredis: fill .debs/redis here first,
#   mkdir -p .debs/redis && (cd .debs/redis && apt-get download redis-server redis-tools \
#     libhiredis0.14 libhiredis-dev libjemalloc2 liblzf1)
# and carry .debs (with the yaml-cpp and SQLite .debs of scripts/device/env.sh).
#   JOBS=16 STEPS=20 WIDTH=512 HEIGHT=512 DEVICES=cuda:0,cuda:1
nvidia-smi --query-gpu=index,name,memory.total --format=csv,noheader

# Redis and hiredis from the carried Debian packages, unpacked into a prefix; Debian's hiredis.pc
# names /usr/include and /usr/lib, so it is written again for the unpacked files.
P="$PWD/.debs/redis-prefix"
compgen -G ".debs/redis/*.deb" > /dev/null || { echo "no .debs/redis/*.deb (see the header)"; exit 1; }
for d in .debs/redis/*.deb; do dpkg -x "$d" "$P"; done
PC="$P/usr/lib/x86_64-linux-gnu/pkgconfig"
cat > "$PC/hiredis.pc" <<PCFILE
Name: hiredis
Description: hiredis (Debian's libhiredis-dev, unpacked for the device call)
Version: 0.14.1
Libs: -L$P/usr/lib/x86_64-linux-gnu -lhiredis
Cflags: -I$P/usr/include -I$P/usr/include/hiredis -D_FILE_OFFSET_BITS=64
PCFILE
export PATH="$P/usr/bin:$PATH"
export LD_LIBRARY_PATH="$P/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export PKG_CONFIG_PATH="$PC${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}"
redis-server --version || { echo "redis-server does not run here"; exit 1; }

device_configure
grep -i "hiredis" "$OUT/configure.log" | head -3
ninja -C build-dev -j"$(nproc)" headroom > "$OUT/build.log" 2>&1 ||
  { grep -E "error|FAILED" "$OUT/build.log" | head -40; exit 1; }
echo "build ok"
BUILD=build-dev OUT="$OUT" DEVICES=${DEVICES:-cuda:0,cuda:1} CKPT=sd1-full JOBS=${JOBS:-16} \
  STEPS=${STEPS:-20} WIDTH=${WIDTH:-512} HEIGHT=${HEIGHT:-512} bash scripts/queue-throughput.sh
