//! Generates the A2A v1.0 service (`lf.a2a.v1.A2AService`, server and
//! client) and `google.rpc.Status`/`ErrorInfo` from the protos in
//! `proto/` with the system `protoc` (Debian's protobuf-compiler, which
//! also supplies `google/protobuf/*`), then ProtoJSON serde impls for the
//! A2A messages (pbjson), and keeps the descriptor set for reflection.

use std::path::PathBuf;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let out = PathBuf::from(std::env::var("OUT_DIR")?);
    let descriptors = out.join("a2a_descriptor.bin");
    tonic_prost_build::configure()
        .file_descriptor_set_path(&descriptors)
        // Well-known types with ProtoJSON serde (Struct, Value, Timestamp),
        // instead of prost's own.
        .compile_well_known_types(true)
        .extern_path(".google.protobuf", "::pbjson_types")
        .compile_protos(
            &[
                "proto/a2a.proto",
                "proto/google/rpc/status.proto",
                "proto/google/rpc/error_details.proto",
            ],
            &["proto"],
        )?;
    let set = std::fs::read(&descriptors)?;
    pbjson_build::Builder::new()
        .register_descriptors(&set)?
        // Served cards carry fields the proto does not know (the v0.3
        // ones); ProtoJSON parsers ignore such fields when asked to.
        .ignore_unknown_fields()
        .build(&[".lf.a2a.v1"])?;
    Ok(())
}
