//! Links the cdylib as librdmacm.so.1 would be linked: its soname, and the
//! version nodes its symbols are bound to (each with `.symver` in the code;
//! rust-lld, rustc's default linker on x86_64 Linux since 1.90, honours
//! both). Then it makes `target/<profile>/rctb-verbs/librdmacm.so.1`, a
//! link to the library cargo writes as `librdmacm.so`, so that one
//! directory holds exactly what `LD_LIBRARY_PATH` should see.

use std::path::{Path, PathBuf};

fn main() {
    let dir = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR"));
    let map = dir.join("librdmacm.map");
    println!("cargo:rerun-if-changed={}", map.display());
    println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,librdmacm.so.1");
    println!("cargo:rustc-cdylib-link-arg=-Wl,--version-script={}", map.display());
    if let Some(profile_dir) = profile_dir() {
        link_into(&profile_dir.join("rctb-verbs"), "librdmacm.so.1", "../librdmacm.so");
    }
}

/// `target/<profile>`: three levels above OUT_DIR (`build/<pkg>-<hash>/out`).
fn profile_dir() -> Option<PathBuf> {
    let out = PathBuf::from(std::env::var_os("OUT_DIR")?);
    Some(out.ancestors().nth(3)?.to_path_buf())
}

/// A symbolic link `dir/name` -> `target`, made once; the library it points
/// at appears when cargo links it, right after this script.
fn link_into(dir: &Path, name: &str, target: &str) {
    let _ = std::fs::create_dir_all(dir);
    let link = dir.join(name);
    if std::fs::read_link(&link).is_ok_and(|t| t == Path::new(target)) {
        return;
    }
    let _ = std::fs::remove_file(&link);
    #[cfg(unix)]
    let _ = std::os::unix::fs::symlink(target, &link);
}
