# Sourced once by scripts/device.sh before its tasks (scripts/device/TASK.sh). The GPU machine reaches no package registry and lacks some of
# headroom's Debian dependencies (yaml-cpp, SQLite): their .debs travel in the git-ignored .debs/
# folder (fill it here with `apt-get download libyaml-cpp-dev libyaml-cpp0.7 libsqlite3-dev
# libsqlite3-0` inside .debs/,
# then name .debs in the device call's carry list) and are unpacked into a prefix CMake searches.
# Also sets HEADROOM_REQUIRE_GPU=1 so that GPU tests fail, not skip, without a usable GPU
# (Note [required GPU] in tests/test_gpu.h).
export HEADROOM_REQUIRE_GPU=1
HR_CMAKE_EXTRA=""
if { ! [ -f /usr/include/yaml-cpp/yaml.h ] || ! [ -f /usr/include/sqlite3.h ]; } && compgen -G ".debs/*.deb" > /dev/null; then
  for d in .debs/*.deb; do dpkg -x "$d" .debs/prefix; done
  HR_CMAKE_EXTRA="-DCMAKE_PREFIX_PATH=$PWD/.debs/prefix/usr"
  export LD_LIBRARY_PATH="$PWD/.debs/prefix/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
fi

# Configures build-dev with CUDA for $HEADROOM_CUDA_ARCHS (default 90, the H200), logging to
# $OUT/configure.log; exits the script with the log's tail when configuring fails.
device_configure() {
  cmake -S . -B build-dev -G Ninja -DCMAKE_BUILD_TYPE=Release -DHEADROOM_CUDA=ON \
    -DHEADROOM_CUDA_ARCHS="${HEADROOM_CUDA_ARCHS:-90}" $HR_CMAKE_EXTRA > "$OUT/configure.log" 2>&1 ||
    { tail -30 "$OUT/configure.log"; exit 1; }
}

# Builds the given targets in build-dev, logging to $OUT/$1; exits the script with the log's
# errors when the build fails.
device_build() {
  local log=$1
  shift
  ninja -C build-dev -j"$(nproc)" "$@" > "$OUT/$log" 2>&1 ||
    { grep -E "error|FAILED" "$OUT/$log" | head -40; exit 1; }
  echo "build ok"
}

# Unpacks ComfyUI a125cd84's files from .devdata/comfyui.tar.xz (scripts/device.sh
# flux-e2e:prepare; carry .devdata) into /tmp/comfy-src/comfyui and copies in the CLIP vocabulary
# the archive leaves out (data/clip_tokenizer/'s, checked to be ComfyUI's git blobs). $1 names the
# task in messages. Returns 1, with a message, when something is missing or differs.
comfyui_unpack() {
  if [ ! -f .devdata/comfyui.tar.xz ]; then
    echo "$1: .devdata/comfyui.tar.xz is missing (scripts/device.sh flux-e2e:prepare, carry .devdata)"
    return 1
  fi
  rm -rf /tmp/comfy-src && mkdir -p /tmp/comfy-src && tar -C /tmp/comfy-src -xJf .devdata/comfyui.tar.xz || return 1
  local f
  for f in vocab.json:469be27c5c010538f845f518c4f5e8574c78f7c8 merges.txt:76e821f1b6f0a9709293c3b6b51ed90980b3166b; do
    [ "$(python3 -c 'import hashlib, sys; d = open(sys.argv[1], "rb").read(); print(hashlib.sha1(b"blob %d\0" % len(d) + d).hexdigest())' "data/clip_tokenizer/${f%%:*}")" = "${f#*:}" ] ||
      { echo "$1: data/clip_tokenizer/${f%%:*} is not ComfyUI a125cd84's"; return 1; }
    cp "data/clip_tokenizer/${f%%:*}" /tmp/comfy-src/comfyui/comfy/sd1_tokenizer/ || return 1
  done
}
