//! Compiles every `.proto` under `proto/switchyard` with the pure-Rust `protox` (no system
//! `protoc`), writes the descriptor set for reflection, and generates tonic clients and servers.

use std::{env, fs, path::PathBuf};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let root = PathBuf::from(env::var("CARGO_MANIFEST_DIR")?).join("../../proto");
    let root = root.canonicalize()?;
    let mut protos = Vec::new();
    collect_protos(&root.join("switchyard"), &mut protos)?;
    protos.sort();
    println!("cargo:rerun-if-changed={}", root.display());
    for proto in &protos {
        println!("cargo:rerun-if-changed={}", proto.display());
    }

    let mut compiler = protox::Compiler::new([&root])?;
    compiler.include_source_info(true).include_imports(true).open_files(&protos)?;
    let out_dir = PathBuf::from(env::var("OUT_DIR")?);
    // The encoded set keeps every option, extensions included: the edge reads the
    // `google.api.http` rules from it, which prost's own descriptor types would drop as unknown
    // fields.
    fs::write(out_dir.join("switchyard_descriptor.bin"), compiler.encode_file_descriptor_set())?;
    let fds = compiler.file_descriptor_set();

    tonic_prost_build::configure().build_client(true).build_server(true).compile_fds(fds)?;
    Ok(())
}

fn collect_protos(dir: &std::path::Path, out: &mut Vec<PathBuf>) -> std::io::Result<()> {
    for entry in fs::read_dir(dir)? {
        let path = entry?.path();
        if path.is_dir() {
            collect_protos(&path, out)?;
        } else if path.extension().is_some_and(|ext| ext == "proto") {
            out.push(path);
        }
    }
    Ok(())
}
