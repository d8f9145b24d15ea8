//! Generates the tonic/prost code of every `.proto` file under `proto/`, with the protoc binary
//! shipped by the `protoc-bin-vendored` crate (no system protoc is needed or used).
//!
//! Owns code generation only; never edits the generated code.

use std::error::Error;

/// The `.proto` files compiled into this crate.
const PROTO_FILES: [&str; 2] = ["proto/raft.proto", "proto/booking.proto"];

fn main() -> Result<(), Box<dyn Error>> {
    for file in PROTO_FILES {
        println!("cargo:rerun-if-changed={file}");
    }
    // The protoc path is handed to prost-build directly rather than through the `PROTOC`
    // environment variable, which a build script can only set with `unsafe`.
    let mut config = prost_build::Config::new();
    config.protoc_executable(protoc_bin_vendored::protoc_bin_path()?);
    // A packed seat map's bytes are shared, not copied, between the reads a node serves from
    // one encoding.
    config.bytes([".booking.v1.SeatMapReply"]);
    tonic_prost_build::configure().compile_with_config(config, &PROTO_FILES, &["proto"])?;
    Ok(())
}
