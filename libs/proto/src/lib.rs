//! Protobuf types of `proto/eddy/v1`: the Kafka point event and the Arrow
//! Flight ticket and command messages.
//!
//! The generated code is checked in (`src/gen/`) so a build needs no `protoc`;
//! the test `generated_code_is_fresh` regenerates it with a pure-Rust protobuf
//! compiler and fails when the `.proto` files and the checked-in code disagree
//! (run it with `EDDY_REGENERATE_PROTO=1` to rewrite the files).

/// `eddy.v1` messages.
#[expect(missing_docs, reason = "generated code")]
// Not `expect`: no clippy lint fires in today's generated code, so an
// expectation would be unfulfilled; the allow keeps regenerated code unlinted.
#[allow(clippy::all, reason = "generated code")]
pub mod v1 {
    include!("gen/eddy.v1.rs");
}

#[cfg(test)]
mod tests {
    use std::path::{Path, PathBuf};

    #[test]
    fn generated_code_is_fresh() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../proto");
        let files = ["eddy/v1/event.proto", "eddy/v1/search.proto"];
        let fds = protox::compile(files, [&root]).expect("proto files compile");
        let out = std::env::temp_dir().join(format!("eddy-proto-gen-{}", std::process::id()));
        std::fs::create_dir_all(&out).expect("tmp dir");
        prost_build::Config::new()
            .out_dir(&out)
            .compile_fds(fds)
            .expect("code generation");
        let fresh = std::fs::read_to_string(out.join("eddy.v1.rs")).expect("generated file");
        let checked_in: PathBuf = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/gen/eddy.v1.rs");
        if std::env::var_os("EDDY_REGENERATE_PROTO").is_some() {
            std::fs::write(&checked_in, &fresh).expect("write generated code");
        }
        let current = std::fs::read_to_string(&checked_in).unwrap_or_default();
        std::fs::remove_dir_all(&out).ok();
        assert!(
            current == fresh,
            "src/gen/eddy.v1.rs is stale: run EDDY_REGENERATE_PROTO=1 cargo test -p eddy-proto"
        );
    }
}
