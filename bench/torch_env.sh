# bench/torch_env.sh - sourced by the benchmarks that run PyTorch on the CPU.
#
# Debian's PyTorch does its matrix products in OpenBLAS, which picks its
# kernels at load time from the CPU's model number. In a virtual machine
# that reports a generic model (seen: an AVX-512 Xeon that OpenBLAS 0.3.21
# runs as "Prescott") it takes its SSE3 kernels, about 5x slower than its
# SkylakeX ones (include/dl/blas.h says more). The reference must run at its
# best, so when OpenBLAS names a core older than its AVX2 kernels on a CPU
# that has AVX2 and FMA, the PyTorch runs get OPENBLAS_CORETYPE=Haswell (or
# SkylakeX with AVX-512F) through TORCH_ENV; dl.h's runs are left as a user
# runs them. An OPENBLAS_CORETYPE set by the caller is kept for both.
#
#   source bench/torch_env.sh; torch_env_init "$PY"
#   env "${TORCH_ENV[@]}" OMP_NUM_THREADS=1 "$PY" bench/torch_x.py ...
TORCH_ENV=()
torch_env_init() {
  local py=${1:-/usr/bin/python3} core flags want
  TORCH_ENV=(OPENBLAS_CORETYPE_NOTE=none)
  [ -n "${OPENBLAS_CORETYPE:-}" ] && { echo "PyTorch's OpenBLAS: OPENBLAS_CORETYPE=$OPENBLAS_CORETYPE (set by the caller)"; return 0; }
  core=$("$py" -c '
import ctypes, ctypes.util
for name in ("libopenblas.so.0", ctypes.util.find_library("openblas")):
    try:
        f = ctypes.CDLL(name).openblas_get_corename
        f.restype = ctypes.c_char_p
        print(f().decode())
        break
    except Exception:
        pass
' 2>/dev/null)
  flags=$(grep -m1 '^flags' /proc/cpuinfo 2>/dev/null)
  case " $flags " in *" avx2 "*) ;; *) echo "PyTorch's OpenBLAS: core ${core:-unknown}"; return 0 ;; esac
  case " $flags " in *" fma "*) ;; *) echo "PyTorch's OpenBLAS: core ${core:-unknown}"; return 0 ;; esac
  case "${core,,}" in
    prescott | core2 | penryn | dunnington | nehalem | atom | sandybridge | katmai | coppermine | northwood | banias | \
      yonah | generic)
      want=Haswell
      case " $flags " in *" avx512f "*) want=SkylakeX ;; esac
      TORCH_ENV=(OPENBLAS_CORETYPE="$want")
      echo "PyTorch's OpenBLAS: core $core detected on a CPU with AVX2 and FMA: its runs get OPENBLAS_CORETYPE=$want" ;;
    *) echo "PyTorch's OpenBLAS: core ${core:-unknown}" ;;
  esac
}
