#!/usr/bin/env bash
# test_units.sh - `meson install --destdir` installs every file the service
# needs, the units pass `systemd-analyze verify`, and the service's
# `systemd-analyze security` exposure stays at or below 2.0.
set -euo pipefail
build=${TD_BUILD_ROOT:?}
if ! command -v systemd-analyze >/dev/null; then
  echo "SKIP: systemd-analyze not installed (Debian package systemd)"
  exit 77
fi
dest=$(mktemp -d /tmp/traind-install-XXXXXX)
trap 'rm -rf "$dest"' EXIT
meson install -C "$build" --destdir "$dest" --no-rebuild >"$dest.log" 2>&1 ||
  { cat "$dest.log"; rm -f "$dest.log"; exit 1; }
rm -f "$dest.log"
prefix=$(meson introspect "$build" --buildoptions |
  python3 -c 'import json,sys; print([o["value"] for o in json.load(sys.stdin) if o["name"]=="prefix"][0])')
fail=0
for f in bin/traind bin/trainctl lib/systemd/system/traind.service \
         lib/systemd/system/traind.socket lib/sysusers.d/traind.conf \
         lib/tmpfiles.d/traind.conf etc/traind/traind.conf \
         share/traind/models/fmnist-cnn.json share/traind/jobs/fmnist-cnn.json \
         share/man/man8/traind.8 share/man/man1/trainctl.1 \
         share/bash-completion/completions/trainctl; do
  if [[ -e "$dest$prefix/$f" ]]; then echo "installed: $prefix/$f"
  else echo "MISSING: $prefix/$f"; fail=1; fi
done
units="$dest$prefix/lib/systemd/system"
# Verify against this machine's systemd, with ExecStart pointing at the
# binary just installed (the prefix itself is not on this machine).
work=$(mktemp -d /tmp/traind-units-XXXXXX)
trap 'rm -rf "$dest" "$work"' EXIT
sed "s|$prefix/bin/traind|$dest$prefix/bin/traind|" "$units/traind.service" >"$work/traind.service"
cp "$units/traind.socket" "$work/"
(cd "$work" && systemd-analyze verify --man=no traind.service traind.socket) || fail=1
score=$(systemd-analyze security --offline=true "$work/traind.service" 2>/dev/null |
  sed -n 's/.*Overall exposure level for traind.service: \([0-9.]*\).*/\1/p')
echo "systemd-analyze security exposure: ${score:-unknown}"
if [[ -z "$score" ]] || ! awk -v s="$score" 'BEGIN{exit !(s <= 2.0)}'; then
  echo "exposure ${score:-unknown} is above the 2.0 target"; fail=1
fi
if ((fail)); then echo "0 passed, 1 failed"; exit 1; fi
echo "1 passed, 0 failed"
