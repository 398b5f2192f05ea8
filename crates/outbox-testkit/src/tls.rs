//! Certificates made at test time, never committed: a CA of its own per test, and leaf
//! certificates it issues for the names a test relay answers to, written as PEM files
//! into a folder removed when the test ends.

use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, KeyPair,
    KeyUsagePurpose,
};
use std::path::{Path, PathBuf};

/// A certificate authority made for one test.
pub struct TestCa {
    cert: rcgen::Certificate,
    key: KeyPair,
}

impl std::fmt::Debug for TestCa {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TestCa").finish_non_exhaustive()
    }
}

impl TestCa {
    /// A new CA named `name`, with a fresh key.
    pub fn new(name: &str) -> TestCa {
        let key = KeyPair::generate().expect("a CA key");
        let mut params = CertificateParams::new(Vec::<String>::new()).expect("CA parameters");
        params.distinguished_name.push(DnType::CommonName, name);
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        let cert = params.self_signed(&key).expect("a self-signed CA");
        TestCa { cert, key }
    }

    /// The CA's certificate as PEM.
    pub fn pem(&self) -> String {
        self.cert.pem()
    }

    /// Issues a server certificate for `names` (host names, or IP addresses written as
    /// such) and writes it, its key and this CA into a fresh folder.
    pub fn issue(&self, names: &[&str]) -> TlsFiles {
        let key = KeyPair::generate().expect("a server key");
        let names: Vec<String> = names.iter().map(|name| (*name).to_owned()).collect();
        let mut params = CertificateParams::new(names).expect("server parameters");
        params
            .distinguished_name
            .push(DnType::CommonName, "outbox test relay");
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        let cert = params
            .signed_by(&key, &self.cert, &self.key)
            .expect("a server certificate");
        let dir = std::env::temp_dir().join(format!("outbox-tls-{}", uuid::Uuid::new_v4()));
        std::fs::create_dir_all(&dir).expect("a folder for the certificates");
        let files = TlsFiles { dir };
        std::fs::write(files.ca(), self.pem()).expect("write the CA");
        std::fs::write(files.cert(), cert.pem()).expect("write the certificate");
        std::fs::write(files.key(), key.serialize_pem()).expect("write the key");
        files
    }
}

/// A CA certificate, a server certificate and its key, as PEM files; the folder is removed
/// when this is dropped.
#[derive(Debug)]
pub struct TlsFiles {
    dir: PathBuf,
}

impl TlsFiles {
    /// The CA that issued the certificate.
    pub fn ca(&self) -> PathBuf {
        self.dir.join("ca.pem")
    }

    /// The server certificate.
    pub fn cert(&self) -> PathBuf {
        self.dir.join("cert.pem")
    }

    /// The server certificate's private key.
    pub fn key(&self) -> PathBuf {
        self.dir.join("key.pem")
    }

    /// The folder holding them.
    pub fn dir(&self) -> &Path {
        &self.dir
    }
}

impl Drop for TlsFiles {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
