#!/usr/bin/env bash
# examples/mnist given malformed files: every one is refused with a non-zero exit status and an
# error message naming the file, never by a signal or a hang, within LIMIT_MS each.
#   tests/faults/malformed_inputs.sh MNIST_BINARY SOURCE_DIR WORK_DIR
# Inputs: the IDX regressions of tests/fuzz (as the training images of a copy of Fashion-MNIST),
# the checkpoint regressions and seeds of tests/fuzz (mode-0 inputs: the file as it is), and a
# real mnist checkpoint truncated,
# bit-flipped and emptied (as --resume).
set -uo pipefail
mnist=$1 src=$2 work=$3
limit_ms=${LIMIT_MS:-3000}
data=/usr/share/datasets/fashion-mnist
rm -rf "$work" && mkdir -p "$work"
failures=0 slowest=0

# Runs mnist with the arguments; passes when it exits 1-125 (not a signal: 128+) with "error:" and
# the file's name in its output, within the limit.
expect_refusal() {
  local file=$1; shift
  local t0 t1 ms rc out
  t0=$(date +%s%N)
  out=$(timeout 30 "$mnist" --limit-steps 1 --stats-every 0 "$@" 2>&1)
  rc=$?
  t1=$(date +%s%N)
  ms=$(( (t1 - t0) / 1000000 ))
  (( ms > slowest )) && slowest=$ms
  local verdict=ok
  if (( rc == 0 || rc >= 124 )); then verdict="exit status $rc (0: accepted; 124: hang; >128: a signal)"
  elif ! grep -q "error:" <<<"$out"; then verdict="no error message"
  elif ! grep -qF "$file" <<<"$out"; then verdict="the message does not name $file"
  elif (( ms > limit_ms )); then verdict="took $ms ms (limit $limit_ms)"
  fi
  printf "%-60s %5d ms  rc %3d  %s\n" "${file#$work/}" "$ms" "$rc" "$verdict"
  if [[ $verdict != ok ]]; then
    failures=$((failures + 1))
    printf '%s\n' "$out" | tail -5 | sed 's/^/    | /'
  fi
}

# ---- IDX files: each regression in place of the training images ------------------------------------
for input in "$src"/tests/fuzz/regressions/idx/*; do
  name=$(basename "$input")
  dir="$work/idx-$name"
  mkdir -p "$dir"
  for f in t10k-images-idx3-ubyte t10k-labels-idx1-ubyte train-labels-idx1-ubyte; do
    ln -s "$(ls "$data"/$f* | head -1)" "$dir/"
  done
  # The fuzz target's first byte says whether to gzip the rest (tests/fuzz/fuzz_idx.cpp).
  if [[ $(head -c1 "$input" | od -An -tu1 | tr -d ' ') == 1 ]]; then
    tail -c +2 "$input" | gzip -c > "$dir/train-images-idx3-ubyte.gz"
    expect_refusal "$dir/train-images-idx3-ubyte.gz" --data "$dir"
  else
    tail -c +2 "$input" > "$dir/train-images-idx3-ubyte"
    expect_refusal "$dir/train-images-idx3-ubyte" --data "$dir"
  fi
done

# ---- checkpoints as --resume ------------------------------------------------------------------------
# The fuzz inputs begin with the checkpoint targets' mode byte (tests/fuzz/fuzz_util.h): the file
# is the rest (its checksum recomputed for an odd mode, as the target does).
for input in "$src"/tests/fuzz/regressions/checkpoint/* "$src"/tests/fuzz/corpus/checkpoint/*; do
  file="$work/$(basename "$input")"
  tail -c +2 "$input" > "$file"
  expect_refusal "$file" --resume "$file"
done
good="$work/good.ckpt"
if "$mnist" --limit-steps 1 --stats-every 0 --checkpoint "$good" > "$work/good.log" 2>&1; then
  size=$(stat -c %s "$good")
  head -c $((size / 2)) "$good" > "$work/truncated.ckpt"
  expect_refusal "$work/truncated.ckpt" --resume "$work/truncated.ckpt"
  cp "$good" "$work/bit-flipped.ckpt"
  printf '\x5a' | dd of="$work/bit-flipped.ckpt" bs=1 seek=$((size / 3)) conv=notrunc status=none
  expect_refusal "$work/bit-flipped.ckpt" --resume "$work/bit-flipped.ckpt"
  : > "$work/empty.ckpt"
  expect_refusal "$work/empty.ckpt" --resume "$work/empty.ckpt"
  mkdir -p "$work/a-directory.ckpt"
  expect_refusal "$work/a-directory.ckpt" --resume "$work/a-directory.ckpt"
  expect_refusal "$work/no-such-file.ckpt" --resume "$work/no-such-file.ckpt"
else
  echo "could not write a checkpoint to damage:"; cat "$work/good.log"
  failures=$((failures + 1))
fi

echo "slowest refusal: $slowest ms"
if (( failures > 0 )); then
  echo "$failures malformed input(s) not refused cleanly"
  exit 1
fi
echo "every malformed input refused cleanly"
