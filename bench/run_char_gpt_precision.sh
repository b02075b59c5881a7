#!/usr/bin/env bash
# run_char_gpt_precision.sh: what --dtype bf16 (and fp16) does to the char-GPT on the CPU, against
# fp32 in the same run: step time, peak resident memory, and (with the loss mode) the final
# validation loss.
#   bench/run_char_gpt_precision.sh speed  [small|large] [rounds] [iters]
#   bench/run_char_gpt_precision.sh memory [small|large]
#   bench/run_char_gpt_precision.sh loss   [iters]
# speed: each round runs fp32, bf16 and fp16 once each, one after the other (a noisy machine slows
#   them alike); prints the median ms/iteration of each and its ratio to fp32's.
# memory: one short run per precision (the peak is reached in the first steps), peak resident
#   memory (getrusage's maxrss, which the trainer prints) and its ratio to fp32's, and beside it
#   the peak in live tensors (the allocator's count, without what its caches hold). Then the
#   same runs of the PyTorch twin (bench/char_gpt_torch.py, fp32 and bf16 under CPU autocast)
#   under /usr/bin/time -v, and minidl's ratio to each; and what importing torch alone takes,
#   since that is part of every PyTorch figure.
# loss: the README recipe (2000 iterations by default) in fp32 and bf16; the final validation
#   losses and their difference.
# small: the README's recipe (4 layers, 4 heads, 128 wide, context 64, batch 12); large: 256 wide,
# context 256, batch 8. Needs the release build (build/release/bin/char_gpt; BUILD_DIR overrides).
set -euo pipefail
cd "$(dirname "$0")/.."
build=${BUILD_DIR:-build/release}
mode=${1:-speed}
size_flags() {
  case "$1" in
    small) echo "" ;;
    large) echo "--n-layer 4 --n-head 4 --n-embd 256 --block-size 256 --batch-size 8" ;;
    *) echo "usage: $0 speed|memory [small|large] ... | loss [iters]" >&2; exit 2 ;;
  esac
}
gpt() { OMP_NUM_THREADS=${OMP_NUM_THREADS:-2} "$build/bin/char_gpt" --device cpu --progress lines "$@" 2>&1; }
ms() { sed -n 's/.*iterations in .* s, \([0-9.]*\) ms\/iter.*/\1/p' | tail -n 1; }
mib() { sed -n 's/.*peak resident memory \([0-9.]*\) MiB.*/\1/p' | tail -n 1; }
tensor_mib() { sed -n 's/.*peak in tensors \([0-9.]*\) MiB.*/\1/p' | tail -n 1; }
val() { sed -n 's/^step [0-9]*: train loss [0-9.]*, val loss \([0-9.]*\).*/\1/p' | tail -n 1; }
median() { tr ' ' '\n' | grep -v '^$' | sort -g | awk '{v[NR] = $1} END {print v[int((NR + 1) / 2)]}'; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN {printf "%.3f", a / b}'; }

echo "{\"bench\":\"meta\",\"date\":\"$(date -u +%F)\",\"commit\":\"$(git rev-parse --short HEAD)$(git diff --quiet || echo +dirty)\",\"cpu\":\"$(lscpu | sed -n 's/^Model name: *//p' | head -n 1)\"}"
case "$mode" in
  speed)
    size=${2:-small}
    rounds=${3:-5}
    iters=${4:-$([ "$size" = large ] && echo 20 || echo 100)}
    read -r -a flags <<<"$(size_flags "$size")"
    common=(--iters "$iters" --warmup 5 --eval-interval 100000 --eval-iters 1 "${flags[@]}")
    declare -A runs
    for ((r = 1; r <= rounds; r++)); do
      for d in fp32 bf16 fp16; do runs[$d]+="$(gpt "${common[@]}" --dtype "$d" | ms) "; done
      echo "round $r: fp32 $(echo "${runs[fp32]}" | awk '{print $NF}'), bf16 $(echo "${runs[bf16]}" | awk '{print $NF}'), fp16 $(echo "${runs[fp16]}" | awk '{print $NF}') ms/iter" >&2
    done
    base=$(echo "${runs[fp32]}" | median)
    echo "char_gpt $size, $iters iterations, $rounds rounds, ms/iteration (median; every run):"
    for d in fp32 bf16 fp16; do
      med=$(echo "${runs[$d]}" | median)
      printf '  %-5s %8s   [%s]   /fp32 %s\n' "$d" "$med" "${runs[$d]% }" "$(ratio "$med" "$base")"
    done
    ;;
  memory)
    size=${2:-large}
    read -r -a flags <<<"$(size_flags "$size")"
    declare -A peak tensors
    for d in fp32 bf16 fp16; do
      out=$(gpt --iters 3 --warmup 1 --eval-interval 100000 --eval-iters 1 "${flags[@]}" --dtype "$d")
      peak[$d]=$(echo "$out" | mib)
      tensors[$d]=$(echo "$out" | tensor_mib)
    done
    echo "char_gpt $size, peak resident memory and peak in live tensors (MiB):"
    for d in fp32 bf16 fp16; do
      printf '  %-5s %8s   /fp32 %s   tensors %8s   /fp32 %s\n' "$d" "${peak[$d]}" "$(ratio "${peak[$d]}" "${peak[fp32]}")" \
        "${tensors[$d]}" "$(ratio "${tensors[$d]}" "${tensors[fp32]}")"
    done
    # GNU time's maximum resident set size, in KiB, as MiB.
    maxrss_mib() { sed -n 's/.*Maximum resident set size (kbytes): \([0-9]*\).*/\1/p' | awk '{printf "%.1f", $1 / 1024}'; }
    if [ -x /usr/bin/time ] && /usr/bin/python3 -c 'import torch' 2>/dev/null; then
      echo "PyTorch twin (bench/char_gpt_torch.py, 2 threads), peak resident memory (MiB):"
      torch_import=$(/usr/bin/time -v /usr/bin/python3 -c 'import torch' 2>&1 | maxrss_mib)
      for d in fp32 bf16; do
        # A failed run says so and leaves the others standing (set -e would end the script here).
        if ! out=$(OMP_NUM_THREADS=2 /usr/bin/time -v /usr/bin/python3 bench/char_gpt_torch.py --threads 2 --iters 3 \
          --warmup 1 --eval-interval 100000 --eval-iters 1 "${flags[@]}" --dtype "$d" 2>&1); then
          echo "  $d: the PyTorch twin failed:" >&2
          echo "$out" | tail -n 5 >&2
          continue
        fi
        torch_peak=$(echo "$out" | maxrss_mib)
        printf '  %-5s %8s   minidl/this %s\n' "$d" "$torch_peak" "$(ratio "${peak[$d]}" "$torch_peak")"
      done
      echo "  (importing torch alone: $torch_import MiB)"
    else
      echo "PyTorch twin skipped: needs /usr/bin/time and /usr/bin/python3 with torch" >&2
    fi
    ;;
  loss)
    iters=${2:-2000}
    declare -A loss
    for d in fp32 bf16; do loss[$d]=$(gpt --iters "$iters" --dtype "$d" | val); done
    echo "char_gpt small, $iters iterations, final validation loss: fp32 ${loss[fp32]}, bf16 ${loss[bf16]}," \
      "difference $(awk -v a="${loss[bf16]}" -v b="${loss[fp32]}" 'BEGIN {printf "%+.4f", a - b}')"
    ;;
  *) echo "usage: $0 speed|memory [small|large] ... | loss [iters]" >&2; exit 2 ;;
esac
