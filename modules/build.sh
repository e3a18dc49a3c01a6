#!/usr/bin/env bash
# Builds every module of this workspace into a component:
#   target/wasm32-wasip2/release/<crate_name>.wasm
# with whichever toolchain is present: rustup with the wasm32-wasip2 target, or Debian's
# offline Rust (rustc-web, cargo-web, rust-web-src, rust-web-llvm, lld, wasi-libc).
# With --check, also shows each component's imports/exports (needs wasm-tools on PATH).
# Extra arguments go to cargo (e.g. -p threshold).
set -euo pipefail
cd "$(dirname "$0")"

check=0
args=()
for a in "$@"; do
    if [[ $a == --check ]]; then check=1; else args+=("$a"); fi
done

if command -v rustup >/dev/null && rustup target list --installed 2>/dev/null | grep -qx wasm32-wasip2; then
    echo "toolchain: rustup (wasm32-wasip2 target)" >&2
    cargo build --release --target wasm32-wasip2 "${args[@]}"
else
    missing=()
    [[ -x /usr/bin/cargo ]] || missing+=(cargo-web)
    [[ -d /usr/lib/rustlib/src/rust/library ]] || missing+=(rust-web-src)
    [[ -d /usr/lib/wasm32-wasi ]] || missing+=(wasi-libc)
    [[ -x /usr/lib/rustlib/x86_64-unknown-linux-gnu/bin/wasm-component-ld ]] || missing+=(rust-web-llvm)
    if ((${#missing[@]})); then
        echo "no toolchain can build wasm32-wasip2 components:" >&2
        echo "  - rustup: not found or target missing (rustup target add wasm32-wasip2)" >&2
        echo "  - Debian offline toolchain: missing ${missing[*]}" >&2
        echo "    (apt-get install rustc-web cargo-web rust-web-src rust-web-llvm lld wasi-libc)" >&2
        exit 1
    fi
    echo "toolchain: Debian offline Rust (-Zbuild-std)" >&2
    PATH=/usr/bin:$PATH RUSTC_BOOTSTRAP=1 RUSTFLAGS="-L /usr/lib/wasm32-wasi" \
        /usr/bin/cargo build --release -Zbuild-std=std,panic_abort --target wasm32-wasip2 "${args[@]}"
fi

out=target/wasm32-wasip2/release
ls -l "$out"/*.wasm | awk '{printf "%8d  %s\n", $5, $NF}'
if ((check)); then
    for f in "$out"/*.wasm; do
        echo "== $f"
        wasm-tools component wit "$f" | grep -E '^  (import|export) ' | grep -v 'import wasi:'
    done
fi
