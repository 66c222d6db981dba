#!/usr/bin/env bash
# A full disk while saving a checkpoint: mounts a 256 KiB tmpfs and runs checkpoint_full_disk in it
# (tests/faults/checkpoint_full_disk.cpp). Mounting needs root, or a user namespace (unshare -rm);
# where neither is allowed the test reports "skipped" (exit code 77).
#   tests/faults/full_disk_test.sh BUILD/tests/checkpoint_full_disk
set -euo pipefail
program=$1
if [[ "${RINGGRAD_IN_NAMESPACE:-0}" != 1 && $(id -u) != 0 ]]; then
  if unshare -rm true 2>/dev/null; then
    RINGGRAD_IN_NAMESPACE=1 exec unshare -rm bash "$0" "$@"
  fi
  echo "skipped: mounting a tmpfs needs root or user namespaces"
  exit 77
fi
dir=$(mktemp -d)
if ! mount -t tmpfs -o size=256k tmpfs "$dir" 2>/dev/null; then
  rmdir "$dir"
  echo "skipped: mount -t tmpfs is not permitted here"
  exit 77
fi
trap 'umount "$dir"; rmdir "$dir"' EXIT
"$program" "$dir"
