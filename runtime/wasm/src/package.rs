//! The deployable file: a component with its manifest in a custom section.
//!
//! A custom section named [`MANIFEST_SECTION`] appended at the component's top level holds the
//! manifest as JSON. Custom sections do not change what the component does, so the file is
//! still an ordinary component any tool can read, and there is no second file to lose.

use crate::manifest::{Manifest, ManifestError};

/// Name of the custom section holding the manifest.
pub const MANIFEST_SECTION: &str = "wedge-manifest";

/// Why a file is not a deployable module.
#[derive(Debug, thiserror::Error)]
pub enum PackageError {
    /// Not a WebAssembly component (a core module, or not Wasm at all).
    #[error("not a WebAssembly component: {0}")]
    NotAComponent(String),
    /// No manifest section.
    #[error(
        "the component carries no `{MANIFEST_SECTION}` section: package it with `wedge module build`"
    )]
    NoManifest,
    /// The manifest is invalid.
    #[error(transparent)]
    Manifest(#[from] ManifestError),
}

/// Returns `component` with `manifest` embedded (replacing an embedded one).
pub fn embed(component: &[u8], manifest: &Manifest) -> Result<Vec<u8>, PackageError> {
    let stripped = without_manifest(component)?;
    let name = MANIFEST_SECTION.as_bytes();
    let payload = manifest.to_json();
    let mut body = Vec::with_capacity(name.len() + payload.len() + 5);
    leb128(&mut body, name.len() as u64);
    body.extend_from_slice(name);
    body.extend_from_slice(&payload);
    let mut out = stripped;
    out.push(0); // custom section id
    leb128(&mut out, body.len() as u64);
    out.extend_from_slice(&body);
    Ok(out)
}

/// Reads the embedded manifest.
pub fn extract(component: &[u8]) -> Result<Manifest, PackageError> {
    let mut found = None;
    for_each_top_level_custom(component, |name, data, _| {
        if name == MANIFEST_SECTION {
            found = Some(data.to_vec());
        }
    })?;
    let data = found.ok_or(PackageError::NoManifest)?;
    Ok(Manifest::from_json(&data)?)
}

/// The component without its manifest sections: what compiles, and what the compile cache is
/// keyed by, so a manifest-only change (version, config, limits) reuses the compiled code.
pub fn without_manifest(component: &[u8]) -> Result<Vec<u8>, PackageError> {
    let mut cuts = Vec::new();
    for_each_top_level_custom(component, |name, _, range| {
        if name == MANIFEST_SECTION {
            cuts.push(range);
        }
    })?;
    let mut out = Vec::with_capacity(component.len());
    let mut at = 0;
    for range in cuts {
        out.extend_from_slice(&component[at..range.start]);
        at = range.end;
    }
    out.extend_from_slice(&component[at..]);
    Ok(out)
}

/// Calls `f(name, data, whole_section_range)` for each custom section of the outermost
/// component, checking that the bytes are a component at all.
fn for_each_top_level_custom(
    bytes: &[u8],
    mut f: impl FnMut(&str, &[u8], std::ops::Range<usize>),
) -> Result<(), PackageError> {
    use wasmparser::{Encoding, Parser, Payload};
    if !bytes.starts_with(b"\0asm") {
        return Err(PackageError::NotAComponent(not_wasm(bytes)));
    }
    let mut depth = 0usize;
    for payload in Parser::new(0).parse_all(bytes) {
        let payload = payload.map_err(|e| PackageError::NotAComponent(e.to_string()))?;
        match payload {
            Payload::Version { encoding, .. } => {
                if depth == 0 && encoding != Encoding::Component {
                    return Err(PackageError::NotAComponent(
                        "this is a core Wasm module; build for wasm32-wasip2 to get a component"
                            .to_owned(),
                    ));
                }
                depth += 1;
            }
            Payload::End(_) => depth = depth.saturating_sub(1),
            Payload::CustomSection(ref reader) if depth == 1 => {
                let Some((_, body)) = payload.as_section() else {
                    continue;
                };
                let start = section_start(bytes, &body).ok_or_else(|| {
                    PackageError::NotAComponent("malformed custom section header".to_owned())
                })?;
                f(reader.name(), reader.data(), start..body.end);
            }
            _ => {}
        }
    }
    if depth != 0 {
        return Err(PackageError::NotAComponent(
            "truncated component".to_owned(),
        ));
    }
    Ok(())
}

/// Says what a file that is not Wasm at all looks like, rather than dumping its first bytes.
fn not_wasm(bytes: &[u8]) -> String {
    let what = if bytes.starts_with(b"\x7fELF") {
        "a native (ELF) executable: build the crate with `wedge module build`, which targets wasm32-wasip2"
    } else if bytes.starts_with(&[0x1f, 0x8b]) {
        "gzip-compressed: unpack it first"
    } else if bytes.starts_with(b"PK\x03\x04") {
        "a zip archive: unpack it first"
    } else if bytes.is_empty() {
        "empty"
    } else if bytes
        .iter()
        .take(512)
        .all(|b| b.is_ascii_graphic() || b.is_ascii_whitespace())
    {
        "text (the WebAssembly text format is not accepted: deploy the .wasm `wedge module build` writes)"
    } else {
        "not a file Wedge recognises: deploy the .wasm `wedge module build` writes"
    };
    format!("the file does not start with Wasm's magic bytes (\\0asm); it is {what}")
}

/// The offset of a section's id byte: the id and the body size (LEB128) precede the body.
fn section_start(bytes: &[u8], body: &std::ops::Range<usize>) -> Option<usize> {
    let size = (body.end - body.start) as u64;
    // Encoders may pad a LEB128; accept any length up to the 5 bytes a u32 can take.
    (1..=5).find_map(|len| {
        let id_at = body.start.checked_sub(len + 1)?;
        let encoded = &bytes[id_at + 1..body.start];
        (bytes[id_at] == 0 && read_leb128(encoded) == Some(size)).then_some(id_at)
    })
}

fn read_leb128(bytes: &[u8]) -> Option<u64> {
    let mut value = 0u64;
    for (i, b) in bytes.iter().enumerate() {
        value |= u64::from(b & 0x7f) << (7 * i);
        let last = b & 0x80 == 0;
        if last != (i == bytes.len() - 1) {
            return None;
        }
    }
    Some(value)
}

fn leb128(out: &mut Vec<u8>, mut v: u64) {
    loop {
        let byte = (v & 0x7f) as u8;
        v >>= 7;
        if v == 0 {
            out.push(byte);
            return;
        }
        out.push(byte | 0x80);
    }
}
