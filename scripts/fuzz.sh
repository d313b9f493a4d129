#!/usr/bin/env bash
# Builds every fuzz target in fuzz/ and runs each for a short, bounded time
# (EVENTMESH_FUZZ_SECONDS, 20 s by default; 0 skips the run) from its
# dictionary. A crash fails the script and leaves the input that caused it
# under fuzz/artifacts/<target>/.
#
# Needs the nightly toolchain (sanitizer flags) and cargo-fuzz, which this
# script installs from crates.io when it is missing.
set -euo pipefail
cd "$(dirname "$0")/../fuzz"
seconds="${EVENTMESH_FUZZ_SECONDS:-20}"
if [ "$seconds" = 0 ]; then
    echo "fuzz targets skipped (EVENTMESH_FUZZ_SECONDS=0)"
    exit 0
fi
if ! rustup run nightly rustc --version >/dev/null 2>&1; then
    echo "the fuzz targets need the nightly toolchain (rustup toolchain list shows none)" >&2
    exit 1
fi
if ! cargo +nightly fuzz --version >/dev/null 2>&1; then
    echo "installing cargo-fuzz"
    cargo +nightly install cargo-fuzz --locked --quiet
fi
target_dir="${CARGO_TARGET_DIR:-$PWD/target}/fuzz"
targets=$(cargo +nightly fuzz list)
cargo +nightly fuzz build --target-dir "$target_dir"
for t in $targets; do
    dict=()
    [ -f "dicts/$t.dict" ] && dict=("-dict=dicts/$t.dict")
    echo "fuzzing $t for ${seconds} s"
    log="$target_dir/$t.log"
    if ! cargo +nightly fuzz run --target-dir "$target_dir" "$t" -- \
        -max_total_time="$seconds" -print_final_stats=1 "${dict[@]}" >"$log" 2>&1; then
        tail -n 60 "$log"
        echo "fuzz target $t failed"
        exit 1
    fi
    tail -n 12 "$log"
done
echo "fuzz targets: $(echo "$targets" | wc -w) ran for ${seconds} s each without a crash"
