//! Without the `s3` feature there is no S3Store: s3_store.rs compiles to
//! nothing, and this says so (as the tshark tests say SKIP without tshark).

#[cfg(not(feature = "s3"))]
#[test]
fn s3_store_needs_the_s3_feature() {
    eprintln!("SKIP s3_store: built without the s3 feature (cargo test -p rctb-gateway --features s3)");
}
