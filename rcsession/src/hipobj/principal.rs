//! The principal: SHA-256 of `access + ":" + secret`, the identity every
//! session is owned by.

use std::fmt;

use sha2::{Digest, Sha256};

/// A requester's identity (32 bytes). Compared in full; its `Debug` and
/// `Display` print hex, never the secret it came from.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct PrincipalId([u8; 32]);

impl PrincipalId {
    /// SHA-256 of `access:secret`.
    pub fn from_credentials(access: &str, secret: &str) -> Self {
        let mut h = Sha256::new();
        h.update(access.as_bytes());
        h.update(b":");
        h.update(secret.as_bytes());
        PrincipalId(h.finalize().into())
    }

    /// A principal from its 32-byte digest, as a C caller passes it
    /// (`rc_principal_id`).
    pub const fn from_digest(digest: [u8; 32]) -> Self {
        PrincipalId(digest)
    }

    /// The 32-byte digest.
    pub const fn digest(&self) -> &[u8; 32] {
        &self.0
    }
}

impl fmt::Display for PrincipalId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for b in self.0 {
            write!(f, "{b:02x}")?;
        }
        Ok(())
    }
}

impl fmt::Debug for PrincipalId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "PrincipalId({self})")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sha256_of_access_colon_secret() {
        // `printf 'AKID:secret' | sha256sum`
        let p = PrincipalId::from_credentials("AKID", "secret");
        assert_eq!(p.to_string(), "1aea0c15398efc831a82928a6eba46c223965690b2c9c0bf4e0a90752b57850b");
        assert_eq!(format!("{p:?}"), format!("PrincipalId({p})"));
        assert_ne!(p, PrincipalId::from_credentials("AKID", "secreT"));
        // The protocol joins with a colon, so the split point is not part of
        // the identity: the digest is over the joined string only.
        assert_eq!(
            PrincipalId::from_credentials("AKID:sec", "ret").0,
            PrincipalId::from_credentials("AKID", "sec:ret").0
        );
    }
}
