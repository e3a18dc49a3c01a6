//! What KubeEdge mappers and the cloud feed DMI:
//!
//! - the bytes of a mapper's connection through the `:authority` shim
//!   (`wedge_dmi::authority::rewrite`): never a panic, whatever arrives;
//! - well-formed header blocks (any headers, any authority, split over CONTINUATION frames,
//!   padded or not, two on one connection so the second leans on the HPACK dynamic table the
//!   first filled) come out decoding to the same headers, with an invalid authority replaced
//!   by one of the same length and a valid one kept, and other frames pass unchanged;
//! - any Device spec (JSON of any shape) converts to a DMI message or a clear error, never a
//!   panic.

use bolero::{TypeGenerator, check};
use wedge_device::definition::{KubeDevice, KubeModel};
use wedge_fuzz::{CI_BUDGET, Few, Json, SHRINK_TIME};

const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

fn run(input: &[u8]) -> (std::io::Result<()>, Vec<u8>) {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("a runtime");
    runtime.block_on(async {
        let mut from = input;
        let mut out = Vec::new();
        let result = wedge_dmi::authority::rewrite(&mut from, &mut out).await;
        (result, out)
    })
}

fn frame(kind: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
    let length = (payload.len() as u32).to_be_bytes();
    let id = stream.to_be_bytes();
    let mut out = vec![
        length[1], length[2], length[3], kind, flags, id[0], id[1], id[2], id[3],
    ];
    out.extend_from_slice(payload);
    out
}

/// Frames of `bytes`: (type, flags, stream, payload), after the preface.
fn frames(mut bytes: &[u8]) -> Vec<(u8, u8, u32, Vec<u8>)> {
    bytes = &bytes[PREFACE.len()..];
    let mut out = Vec::new();
    while bytes.len() >= 9 {
        let length = u32::from_be_bytes([0, bytes[0], bytes[1], bytes[2]]) as usize;
        let stream = u32::from_be_bytes([bytes[5], bytes[6], bytes[7], bytes[8]]);
        out.push((bytes[3], bytes[4], stream, bytes[9..9 + length].to_vec()));
        bytes = &bytes[9 + length..];
    }
    out
}

/// Raw bytes after a preface: never a panic.
#[test]
fn dmi_connection_raw_bytes() {
    check!()
        .with_test_time(CI_BUDGET / 2)
        .with_shrink_time(SHRINK_TIME)
        .for_each(|bytes: &[u8]| {
            let mut input = PREFACE.to_vec();
            input.extend_from_slice(bytes);
            let _ = run(&input);
        });
}

#[derive(Debug, TypeGenerator)]
struct Block {
    /// Header names and values (names lowercased ASCII, as HTTP/2 requires).
    headers: Few<(String, String)>,
    authority: String,
    /// Fragment size for CONTINUATION splits (0: one frame).
    split: u8,
    padding: u8,
    /// A DATA frame before the block, passed unchanged.
    data: Vec<u8>,
}

/// Well-formed blocks: the same headers come out, the authority made valid.
#[test]
fn dmi_connection_header_blocks() {
    check!()
        .with_type::<Block>()
        .with_test_time(CI_BUDGET / 2)
        .with_shrink_time(SHRINK_TIME)
        .for_each(|block| {
            let mut headers: Vec<(Vec<u8>, Vec<u8>)> = vec![
                (b":method".to_vec(), b"POST".to_vec()),
                (b":authority".to_vec(), block.authority.as_bytes().to_vec()),
            ];
            for (name, value) in &block.headers.0 {
                let name: String = name
                    .chars()
                    .filter(|c| c.is_ascii_lowercase() || *c == '-')
                    .collect();
                if !name.is_empty() {
                    headers.push((name.into_bytes(), value.as_bytes().to_vec()));
                }
            }
            let mut encoder = loona_hpack::Encoder::new();
            let mut input = PREFACE.to_vec();
            input.extend(frame(0x0, 0, 1, &block.data));
            for stream in [1, 3] {
                let encoded =
                    encoder.encode(headers.iter().map(|(n, v)| (n.as_slice(), v.as_slice())));
                let split = if block.split == 0 {
                    encoded.len().max(1)
                } else {
                    block.split as usize
                };
                let mut chunks = encoded.chunks(split).collect::<Vec<_>>();
                if chunks.is_empty() {
                    chunks.push(&[]);
                }
                for (i, chunk) in chunks.iter().enumerate() {
                    let last = i + 1 == chunks.len();
                    let end = if last { 0x4 } else { 0 };
                    if i == 0 {
                        let mut payload = vec![block.padding];
                        payload.extend_from_slice(chunk);
                        payload.extend(std::iter::repeat_n(0u8, block.padding as usize));
                        input.extend(frame(0x1, end | 0x8 | 0x1, stream, &payload));
                    } else {
                        input.extend(frame(0x9, end, stream, chunk));
                    }
                }
            }
            let (result, out) = run(&input);
            result.expect("a well-formed connection passes");
            let out_frames = frames(&out);
            assert_eq!(
                out_frames[0],
                (0x0, 0, 1, block.data.clone()),
                "DATA unchanged"
            );
            let valid = !block.authority.is_empty()
                && block
                    .authority
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b"-._~:[]@!$&'()*+,;=".contains(&b));
            let want: Vec<(Vec<u8>, Vec<u8>)> = headers
                .iter()
                .map(|(n, v)| {
                    if n == b":authority" && !valid {
                        (n.clone(), wedge_dmi::authority::same_length_authority(v))
                    } else {
                        (n.clone(), v.clone())
                    }
                })
                .collect();
            let mut decoder = loona_hpack::Decoder::new();
            for stream in [1, 3] {
                let mut fragment = Vec::new();
                let mut flags = Vec::new();
                for (kind, flag, id, payload) in &out_frames[1..] {
                    if *id != stream {
                        continue;
                    }
                    assert!(*kind == 0x1 || *kind == 0x9);
                    flags.push(*flag);
                    // A forwarded HEADERS frame keeps its padding: strip it.
                    if *kind == 0x1 && flag & 0x8 != 0 {
                        let pad = payload[0] as usize;
                        fragment.extend_from_slice(&payload[1..payload.len() - pad]);
                    } else {
                        fragment.extend_from_slice(payload);
                    }
                }
                assert_eq!(flags[0] & 0x1, 0x1, "END_STREAM kept");
                assert_eq!(flags.last().unwrap() & 0x4, 0x4, "END_HEADERS on the last");
                let decoded = decoder.decode(&fragment).expect("decodes");
                assert_eq!(decoded, want);
            }
        });
}

/// Device and model specs of any shape: converted or refused, never a panic.
#[test]
fn dmi_device_conversion() {
    check!()
        .with_type::<(Json, Json)>()
        .with_test_time(CI_BUDGET / 2)
        .with_shrink_time(SHRINK_TIME)
        .for_each(|(device_spec, model_spec)| {
            const KEYS: &[&str] = &[
                "protocol",
                "configData",
                "protocolName",
                "properties",
                "name",
                "desired",
                "value",
                "visitors",
                "pushMethod",
                "mqtt",
                "http",
                "dbMethod",
                "stateReport",
                "reportCycle",
                "methods",
                "protocolConfigData",
                "metadata",
                "anomalyDetection",
            ];
            const WORDS: &[&str] = &["setpoint", "modbus", "x", ""];
            let device = KubeDevice {
                namespace: "default".into(),
                name: "d".into(),
                model: "m".into(),
                spec: device_spec.value(KEYS, WORDS),
                ..KubeDevice::default()
            };
            let model = KubeModel {
                namespace: "default".into(),
                name: "m".into(),
                spec: model_spec.value(KEYS, WORDS),
                ..KubeModel::default()
            };
            if let Ok(converted) = wedge_dmi::convert::device(&device, &model, &Default::default())
            {
                let spec = converted.spec.expect("a spec");
                assert!(spec.protocol.and_then(|p| p.config_data).is_some());
                for p in spec.properties {
                    assert!(p.desired.is_some());
                    assert!(p.visitors.and_then(|v| v.config_data).is_some());
                }
            }
        });
}
