#!/usr/bin/env bash
# Rebuild the C core in a checkout without disturbing processes that have the
# old module loaded: build aside, then atomically rename into place.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
exec 9>/tmp/simstore-build.lock
flock 9
"$PY" setup.py -q build_ext --build-temp build/tmp --build-lib build/lib >/dev/null
so=$(ls build/lib/simstore/native/_native*.so)
cp "$so" simstore/native/.native.tmp.so
mv -f simstore/native/.native.tmp.so "simstore/native/$(basename "$so")"
echo "built $(basename "$so")"
