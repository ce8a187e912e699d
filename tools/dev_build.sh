#!/usr/bin/env bash
# Rebuild the C core in a checkout without disturbing processes that have the
# old module loaded: build aside, then atomically rename into place.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
exec 9>/tmp/simstore-build.lock
flock 9
rm -f build/lib/simstore/native/_native*.so  # one build's module only, whatever its suffix
"$PY" setup.py -q build_ext --build-temp build/tmp --build-lib build/lib >/dev/null
so=$(ls build/lib/simstore/native/_native*.so)
name=$(basename "$so")
cp "$so" simstore/native/.native.tmp.so
mv -f simstore/native/.native.tmp.so "simstore/native/$name"
# A module left under another suffix (abi3 or per version) would shadow or be shadowed by
# this one; processes that loaded it keep their mapping.
for old in simstore/native/_native*.so; do
    [ "$old" = "simstore/native/$name" ] || rm -f "$old"
done
echo "built $name"
