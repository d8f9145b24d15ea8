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
    // An error code's wire name (`booking-code`, the REST `code`) is its Rust variant in
    // snake_case (prost strips the `ERROR_CODE_` prefix): strum derives both directions from
    // the one list in booking.proto.
    config.enum_attribute(
        ".booking.v1.ErrorCode",
        "#[derive(strum::IntoStaticStr, strum::EnumString, strum::EnumIter)] \
         #[strum(serialize_all = \"snake_case\")]",
    );
    tonic_prost_build::configure().compile_with_config(config, &PROTO_FILES, &["proto"])?;
    Ok(())
}
