//! A throw-away PKI for TLS tests: a CA, a server certificate for 127.0.0.1 / localhost and a
//! client certificate, written as PEM files into a directory.

use std::net::{IpAddr, Ipv4Addr};
use std::path::{Path, PathBuf};

use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair, SanType};

/// The PEM files of one test PKI.
pub struct Pki {
    pub ca: PathBuf,
    pub server_cert: PathBuf,
    pub server_key: PathBuf,
    pub client_cert: PathBuf,
    pub client_key: PathBuf,
}

fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    path
}

/// A CA named `ca_name` and the certificates it signed, under `dir` (file names prefixed with
/// `prefix`, so two PKIs can share a directory).
pub fn make(dir: &Path, prefix: &str, ca_name: &str) -> Pki {
    let ca_key = KeyPair::generate().unwrap();
    let mut ca_params = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca_params
        .distinguished_name
        .push(DnType::CommonName, ca_name);
    let ca_cert = ca_params.self_signed(&ca_key).unwrap();
    let issuer = Issuer::new(ca_params, ca_key);
    let server_key = KeyPair::generate().unwrap();
    let mut server_params = CertificateParams::new(vec!["localhost".to_owned()]).unwrap();
    server_params
        .subject_alt_names
        .push(SanType::IpAddress(IpAddr::V4(Ipv4Addr::LOCALHOST)));
    let server_cert = server_params.signed_by(&server_key, &issuer).unwrap();
    let client_key = KeyPair::generate().unwrap();
    let mut client_params = CertificateParams::new(Vec::<String>::new()).unwrap();
    client_params
        .distinguished_name
        .push(DnType::CommonName, "edge-test");
    let client_cert = client_params.signed_by(&client_key, &issuer).unwrap();
    Pki {
        ca: write(dir, &format!("{prefix}ca.pem"), &ca_cert.pem()),
        server_cert: write(dir, &format!("{prefix}server.pem"), &server_cert.pem()),
        server_key: write(
            dir,
            &format!("{prefix}server.key"),
            &server_key.serialize_pem(),
        ),
        client_cert: write(dir, &format!("{prefix}client.pem"), &client_cert.pem()),
        client_key: write(
            dir,
            &format!("{prefix}client.key"),
            &client_key.serialize_pem(),
        ),
    }
}
