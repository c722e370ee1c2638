#!/usr/bin/env bash
# tools/deps.sh WHAT - install what WHAT (run | test | firmware | bench | docs) needs from
# Debian's packages, only where something is missing. Needs root (or sudo)
# when it has to install; prints the apt-get line otherwise.
set -u
want=()
need() { # package [command-or-file that proves it is there]
  local pkg=$1 probe=${2:-}
  if [ -n "$probe" ]; then
    if [[ "$probe" == /* ]]; then [ -e "$probe" ] && return; else command -v "$probe" >/dev/null && return; fi
  else
    dpkg -s "$pkg" >/dev/null 2>&1 && return
  fi
  want+=("$pkg")
}
case "${1:-test}" in
  run)   need gcc gcc; need make make; need libc6-dev /usr/include/stdio.h; need libgomp1
         need libopenblas-dev; need zlib1g-dev /usr/include/zlib.h; need libstb-dev /usr/include/stb/stb_image.h
         need dataset-fashion-mnist /usr/share/datasets/fashion-mnist; need fortunes ;;
  test)  need gcc gcc; need g++ g++; need clang clang; need make make; need libc6-dev /usr/include/stdio.h
         need libopenblas-dev; need libgomp1; need zlib1g-dev /usr/include/zlib.h
         need libstb-dev /usr/include/stb/stb_image.h; need dataset-fashion-mnist /usr/share/datasets/fashion-mnist
         need fortunes; need libopenmpi-dev /usr/bin/mpicc; need openmpi-bin /usr/bin/mpirun
         need cmake cmake; need pkgconf pkg-config
         need gcc-arm-none-eabi arm-none-eabi-gcc; need libnewlib-arm-none-eabi /usr/lib/arm-none-eabi/newlib
         need qemu-system-arm qemu-system-arm; need doxygen doxygen ;;
  docs)  need doxygen doxygen ;;
  firmware) need gcc gcc; need make make; need libc6-dev /usr/include/stdio.h; need libgomp1; need libopenblas-dev
         need zlib1g-dev /usr/include/zlib.h; need dataset-fashion-mnist /usr/share/datasets/fashion-mnist
         need gcc-arm-none-eabi arm-none-eabi-gcc; need libnewlib-arm-none-eabi /usr/lib/arm-none-eabi/newlib
         need qemu-system-arm qemu-system-arm ;;
  bench) need gcc gcc; need make make; need libopenblas-dev; need python3-torch; need python3-numpy
         need zlib1g-dev /usr/include/zlib.h; need libstb-dev /usr/include/stb/stb_image.h
         need dataset-fashion-mnist /usr/share/datasets/fashion-mnist
         need libopenmpi-dev /usr/bin/mpicc; need openmpi-bin /usr/bin/mpirun ;;
  *) echo "usage: $0 run|test|firmware|bench|docs" >&2; exit 2 ;;
esac
[ ${#want[@]} -eq 0 ] && exit 0
echo "installing: ${want[*]}"
SUDO=""
if [ "$(id -u)" != 0 ]; then
  if command -v sudo >/dev/null; then SUDO=sudo
  else echo "not root: run  apt-get install -y ${want[*]}  as root first" >&2; exit 1; fi
fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq || true
$SUDO apt-get install -y -qq --no-install-recommends "${want[@]}" >/dev/null || {
  echo "apt-get install ${want[*]} failed" >&2; exit 1; }
