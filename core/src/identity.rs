//! Who a process is, with proof (invariant P6).
//!
//! A process's *token* — the 64-bit name peers index it by and settle simultaneous connects with
//! (P4) — is the first eight bytes of an Ed25519 public key. Every HELLO carries the whole key
//! and a fresh nonce; after both HELLOs each side sends a PROOF: its signature over both keys,
//! both nonces, its role and the layout fingerprint ([`transcript`]). A session is established,
//! and its peer known by its token, only once that signature verifies. So claiming another
//! process's token needs its secret key: a peer that copies a token (or a whole HELLO, or a
//! PROOF from another connection, whose nonces differ) stays an unproven connection that is
//! closed, never indexed as that process and never able to supersede its connection.
//!
//! Choosing a key whose public key starts with a given token is a 2⁶⁴ search. A token is
//! therefore as good as the key for indexing, and costs nothing on the send path.
//!
//! What this does *not* give: secrecy or integrity of data (UCX has neither), nor protection
//! against a relay that two honest processes both connected to — see the README's threat model.
//!
//! ```
//! use tagspace_core::identity::{Identity, token_of};
//! let me = Identity::from_seed(&[7; 32]);
//! assert_eq!(me.token(), token_of(me.public_key()));
//! assert_ne!(me.fresh_nonce(), me.fresh_nonce());
//! ```

use core::fmt;
use core::sync::atomic::{AtomicU64, Ordering};
use ed25519_dalek::{Signature, Signer, SigningKey, VerifyingKey};
use sha2::{Digest, Sha512};

use crate::wire::Role;

/// Bytes of a public key.
pub const PUBLIC_KEY_LEN: usize = 32;
/// Bytes of a HELLO nonce.
pub const NONCE_LEN: usize = 16;
/// Bytes of a PROOF signature.
pub const SIGNATURE_LEN: usize = 64;

const TRANSCRIPT_TAG: &[u8; 16] = b"tagspace-proof-2";
/// Bytes [`transcript`] signs.
pub const TRANSCRIPT_LEN: usize = 16 + 1 + 8 + 2 * (PUBLIC_KEY_LEN + NONCE_LEN);

/// The token a public key stands for: its first eight bytes, big endian.
pub fn token_of(public_key: &[u8; PUBLIC_KEY_LEN]) -> u64 {
    let mut t = [0u8; 8];
    t.copy_from_slice(&public_key[..8]);
    u64::from_be_bytes(t)
}

/// A process's key pair and nonce source. Make one per process (from 32 random bytes) and share
/// it by reference: every session of the process signs with it.
pub struct Identity {
    key: SigningKey,
    public: [u8; PUBLIC_KEY_LEN],
    nonce_key: [u8; 32],
    counter: AtomicU64,
}

impl Identity {
    /// The identity for a 32-byte secret seed. The seed must be secret and random (from the
    /// operating system): anyone who knows it can be this process.
    pub fn from_seed(seed: &[u8; 32]) -> Identity {
        let key = SigningKey::from_bytes(seed);
        let public = key.verifying_key().to_bytes();
        let digest = Sha512::new()
            .chain_update(b"tagspace-nonce-key")
            .chain_update(seed)
            .finalize();
        let mut nonce_key = [0u8; 32];
        nonce_key.copy_from_slice(&digest[..32]);
        Identity {
            key,
            public,
            nonce_key,
            counter: AtomicU64::new(0),
        }
    }

    /// The public key peers see in this process's HELLOs.
    pub fn public_key(&self) -> &[u8; PUBLIC_KEY_LEN] {
        &self.public
    }

    /// This process's token (see [`token_of`]).
    pub fn token(&self) -> u64 {
        token_of(&self.public)
    }

    /// A nonce never returned before by this identity, and unpredictable without its seed.
    pub fn fresh_nonce(&self) -> [u8; NONCE_LEN] {
        let n = self.counter.fetch_add(1, Ordering::Relaxed);
        let digest = Sha512::new()
            .chain_update(self.nonce_key)
            .chain_update(n.to_le_bytes())
            .finalize();
        let mut nonce = [0u8; NONCE_LEN];
        nonce.copy_from_slice(&digest[..NONCE_LEN]);
        nonce
    }

    pub(crate) fn signer(&self) -> SigningKey {
        self.key.clone()
    }
}

impl fmt::Debug for Identity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Identity")
            .field("token", &format_args!("{:#018x}", self.token()))
            .finish_non_exhaustive()
    }
}

/// One side of a handshake: its key and its nonce.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Party {
    /// Public key.
    pub public_key: [u8; PUBLIC_KEY_LEN],
    /// Nonce from its HELLO.
    pub nonce: [u8; NONCE_LEN],
}

/// What a PROOF signs: the signer's role, the layout fingerprint, and both parties (initiator
/// first). Binding both nonces makes a PROOF useless on any other connection; binding the role
/// makes it useless in the other direction of the same one.
pub fn transcript(
    signer: Role,
    fingerprint: u64,
    initiator: &Party,
    acceptor: &Party,
) -> [u8; TRANSCRIPT_LEN] {
    let mut t = [0u8; TRANSCRIPT_LEN];
    let mut at = 0;
    let mut put = |bytes: &[u8]| {
        t[at..at + bytes.len()].copy_from_slice(bytes);
        at += bytes.len();
    };
    put(TRANSCRIPT_TAG);
    put(&[signer as u8]);
    put(&fingerprint.to_be_bytes());
    for p in [initiator, acceptor] {
        put(&p.public_key);
        put(&p.nonce);
    }
    t
}

pub(crate) fn sign(key: &SigningKey, message: &[u8]) -> [u8; SIGNATURE_LEN] {
    key.sign(message).to_bytes()
}

/// Why a peer's key or proof is refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ProofError {
    /// The HELLO's public key is not a valid Ed25519 point, or is a weak (small-order) one.
    BadPublicKey,
    /// The PROOF's signature does not verify against the key the HELLO claimed.
    BadSignature,
}

impl fmt::Display for ProofError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ProofError::BadPublicKey => f.write_str("peer's public key is invalid or weak"),
            ProofError::BadSignature => f.write_str(
                "peer's proof does not verify: it does not hold the key its token stands for",
            ),
        }
    }
}

/// Checks a HELLO's public key: a valid point, not of small order.
pub(crate) fn check_public_key(pk: &[u8; PUBLIC_KEY_LEN]) -> Result<VerifyingKey, ProofError> {
    let vk = VerifyingKey::from_bytes(pk).map_err(|_| ProofError::BadPublicKey)?;
    if vk.is_weak() {
        return Err(ProofError::BadPublicKey);
    }
    Ok(vk)
}

/// Verifies `signature` over `message` with `pk` (strict: no malleable or weak-key forms).
pub fn verify(
    pk: &[u8; PUBLIC_KEY_LEN],
    message: &[u8],
    signature: &[u8; SIGNATURE_LEN],
) -> Result<(), ProofError> {
    let vk = check_public_key(pk)?;
    vk.verify_strict(message, &Signature::from_bytes(signature))
        .map_err(|_| ProofError::BadSignature)
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    fn party(id: &Identity) -> Party {
        Party {
            public_key: *id.public_key(),
            nonce: id.fresh_nonce(),
        }
    }

    #[test]
    fn a_proof_verifies_only_for_its_key_role_and_nonces() {
        let (a, b, m) = (
            Identity::from_seed(&[1; 32]),
            Identity::from_seed(&[2; 32]),
            Identity::from_seed(&[3; 32]),
        );
        let (pa, pb) = (party(&a), party(&b));
        let t = transcript(Role::Initiator, 9, &pa, &pb);
        let sig = sign(&a.signer(), &t);
        assert_eq!(verify(a.public_key(), &t, &sig), Ok(()));
        // another key claiming a's token cannot sign for it
        let forged = sign(&m.signer(), &t);
        assert_eq!(
            verify(a.public_key(), &t, &forged),
            Err(ProofError::BadSignature)
        );
        // the same signature on another connection (fresh nonce), another role or layout
        let other = transcript(Role::Initiator, 9, &pa, &party(&b));
        assert_eq!(
            verify(a.public_key(), &other, &sig),
            Err(ProofError::BadSignature)
        );
        let reflected = transcript(Role::Acceptor, 9, &pa, &pb);
        assert_eq!(
            verify(a.public_key(), &reflected, &sig),
            Err(ProofError::BadSignature)
        );
        let relayout = transcript(Role::Initiator, 10, &pa, &pb);
        assert_eq!(
            verify(a.public_key(), &relayout, &sig),
            Err(ProofError::BadSignature)
        );
    }

    #[test]
    fn invalid_and_weak_keys_are_refused() {
        // the identity point (y = 1) has small order
        let mut weak = [0u8; 32];
        weak[0] = 1;
        assert_eq!(
            check_public_key(&weak).err(),
            Some(ProofError::BadPublicKey)
        );
        // y = 2 is not on the curve
        let mut off = [0u8; 32];
        off[0] = 2;
        assert!(check_public_key(&off).is_err());
        assert!(check_public_key(Identity::from_seed(&[5; 32]).public_key()).is_ok());
    }

    #[test]
    fn tokens_and_nonces_differ_between_identities() {
        let (a, b) = (Identity::from_seed(&[1; 32]), Identity::from_seed(&[2; 32]));
        assert_ne!(a.token(), b.token());
        assert_ne!(a.fresh_nonce(), b.fresh_nonce());
        let again = Identity::from_seed(&[1; 32]);
        assert_eq!(again.token(), a.token());
    }
}
