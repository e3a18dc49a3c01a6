//! Generates the CRI v1 messages and the two clients (RuntimeService, ImageService) from
//! `proto/`, with protox (a protobuf compiler in Rust), so building needs no `protoc`. No
//! server: the runtime (containerd) is the server, and the tests talk to a real one.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let proto = "proto/runtime/v1/api.proto";
    println!("cargo:rerun-if-changed={proto}");
    let descriptors = protox::compile([proto], ["proto"])?;
    tonic_prost_build::configure()
        .build_server(false)
        .build_client(true)
        .compile_fds(descriptors)?;
    Ok(())
}
