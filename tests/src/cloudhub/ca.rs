//! The simulator's certificate authority: a real ECDSA P-256 CA made with rcgen, the server and
//! client certificates it issues, and KubeEdge's 4-part bootstrap token signed with HS256.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use anyhow::{Context, Result, bail};
use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use rcgen::{
    BasicConstraints, CertificateParams, CertificateSigningRequestParams, CertifiedIssuer,
    DistinguishedName, DnType, IsCa, KeyPair, KeyUsagePurpose,
};
use ring::hmac;
use sha2::{Digest, Sha256};

/// A certificate issued by [`CloudCa`], with its private key.
pub struct IssuedCert {
    /// The certificate, DER.
    pub cert_der: Vec<u8>,
    /// The certificate, PEM `CERTIFICATE`.
    pub cert_pem: String,
    /// The private key, PKCS#8 DER.
    pub key_der: Vec<u8>,
    /// The private key, PEM (`PRIVATE KEY`, PKCS#8).
    pub key_pem: String,
}

/// How `/edge.crt` deviates from signing the CSR as it is (the default: as asked, valid for as
/// long as rcgen's default, i.e. practically forever).
#[derive(Debug, Clone, Default)]
pub struct Issuing {
    /// Issue certificates valid from now for this long.
    pub validity: Option<Duration>,
    /// Issue certificates with this CN instead of the CSR's.
    pub cn: Option<String>,
    /// Answer the first this many `/edge.crt` requests with 503, as a cloud that is briefly
    /// unavailable (counted per start of the listener).
    pub refuse_first: u32,
}

/// A real CA plus the HMAC secret that signs bootstrap tokens.
pub struct CloudCa {
    issuer: CertifiedIssuer<'static, KeyPair>,
    secret: hmac::Key,
}

impl CloudCa {
    /// A fresh CA (`CN=KubeEdge`, as cloudcore names its own) and a random token secret.
    pub fn new() -> Result<CloudCa> {
        let mut params = CertificateParams::new(Vec::<String>::new())?;
        params.distinguished_name = DistinguishedName::new();
        params
            .distinguished_name
            .push(DnType::CommonName, "KubeEdge");
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        let key = KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256)?;
        let issuer = CertifiedIssuer::self_signed(params, key).context("self-sign the CA")?;
        let rng = ring::rand::SystemRandom::new();
        let secret = hmac::Key::generate(hmac::HMAC_SHA256, &rng)
            .map_err(|_| anyhow::anyhow!("no randomness for the token secret"))?;
        Ok(CloudCa { issuer, secret })
    }

    /// The CA certificate, PEM.
    pub fn ca_pem(&self) -> String {
        self.issuer.pem()
    }

    /// The CA certificate, DER (what `GET /ca.crt` returns).
    pub fn ca_der(&self) -> Vec<u8> {
        self.issuer.der().to_vec()
    }

    /// A server certificate for `hosts` (DNS names or IP addresses, as SANs).
    pub fn server_cert(&self, hosts: &[&str]) -> Result<IssuedCert> {
        let names: Vec<String> = hosts.iter().map(|h| (*h).to_owned()).collect();
        let mut params = CertificateParams::new(names)?;
        params
            .distinguished_name
            .push(DnType::CommonName, "cloudcore");
        self.issue(params)
    }

    /// A client certificate with common name `cn` (`system:node:<node>` for a node), for tests
    /// that skip the bootstrap.
    pub fn client_cert(&self, cn: &str) -> Result<IssuedCert> {
        let mut params = CertificateParams::new(Vec::<String>::new())?;
        params.distinguished_name = DistinguishedName::new();
        params.distinguished_name.push(DnType::CommonName, cn);
        self.issue(params)
    }

    /// A client certificate like [`CloudCa::client_cert`], valid from now for `validity` (for
    /// tests of rotation, which happens at 70–90 % of the validity).
    pub fn client_cert_valid_for(&self, cn: &str, validity: Duration) -> Result<IssuedCert> {
        let mut params = CertificateParams::new(Vec::<String>::new())?;
        params.distinguished_name = DistinguishedName::new();
        params.distinguished_name.push(DnType::CommonName, cn);
        valid_from_now(&mut params, validity);
        self.issue(params)
    }

    fn issue(&self, params: CertificateParams) -> Result<IssuedCert> {
        let key = KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256)?;
        let cert = params.signed_by(&key, &self.issuer)?;
        Ok(IssuedCert {
            cert_der: cert.der().to_vec(),
            cert_pem: cert.pem(),
            key_der: key.serialize_der(),
            key_pem: key.serialize_pem(),
        })
    }

    /// Signs a CSR (DER) as cloudcore does for `/edge.crt`; returns the certificate DER.
    pub fn sign_csr(&self, csr_der: &[u8]) -> Result<Vec<u8>> {
        self.sign_csr_with(csr_der, &Issuing::default())
    }

    /// [`CloudCa::sign_csr`], with the changes `issuing` asks for (a short validity, another
    /// CN) so tests can see how the node treats such certificates.
    pub fn sign_csr_with(&self, csr_der: &[u8], issuing: &Issuing) -> Result<Vec<u8>> {
        let der = rustls::pki_types::CertificateSigningRequestDer::from(csr_der);
        let mut csr = CertificateSigningRequestParams::from_der(&der).context("malformed CSR")?;
        if let Some(validity) = issuing.validity {
            valid_from_now(&mut csr.params, validity);
        }
        if let Some(cn) = &issuing.cn {
            csr.params
                .distinguished_name
                .push(DnType::CommonName, cn.as_str());
        }
        Ok(csr.signed_by(&self.issuer)?.der().to_vec())
    }

    /// KubeEdge's 4-part token: `<hex sha256(CA DER)>.<jwt>`, the JWT (HS256) carrying `exp`
    /// (Unix seconds) and the node name.
    pub fn token(&self, node: &str, exp: u64) -> String {
        let digest = hex(&Sha256::digest(self.ca_der()));
        format!("{digest}.{}", self.jwt(node, exp))
    }

    /// A token whose `exp` lies an hour in the past.
    pub fn expired_token(&self, node: &str) -> String {
        self.token(node, unix_now().saturating_sub(3600))
    }

    fn jwt(&self, node: &str, exp: u64) -> String {
        let header = URL_SAFE_NO_PAD.encode(br#"{"alg":"HS256","typ":"JWT"}"#);
        let payload =
            URL_SAFE_NO_PAD.encode(serde_json::json!({"exp": exp, "node": node}).to_string());
        let signed = format!("{header}.{payload}");
        let sig = URL_SAFE_NO_PAD.encode(hmac::sign(&self.secret, signed.as_bytes()));
        format!("{signed}.{sig}")
    }

    /// Checks a bearer JWT (token parts 2–4): signature, then `exp`. The error text is what the
    /// `/edge.crt` endpoint answers with 401.
    pub fn verify_jwt(&self, jwt: &str) -> Result<()> {
        let (signed, sig) = jwt.rsplit_once('.').context("token is not a JWT")?;
        let sig = URL_SAFE_NO_PAD
            .decode(sig)
            .context("token signature is not base64url")?;
        if hmac::verify(&self.secret, signed.as_bytes(), &sig).is_err() {
            bail!("token signature is invalid");
        }
        let payload = signed.split_once('.').context("token is not a JWT")?.1;
        let payload = URL_SAFE_NO_PAD
            .decode(payload)
            .context("token payload is not base64url")?;
        let claims: serde_json::Value =
            serde_json::from_slice(&payload).context("token payload is not JSON")?;
        let exp = claims["exp"].as_u64().context("token has no exp")?;
        if exp <= unix_now() {
            bail!("token is expired");
        }
        Ok(())
    }
}

/// Makes `params` valid from now (X.509 keeps whole seconds) for `validity`.
fn valid_from_now(params: &mut CertificateParams, validity: Duration) {
    let since_epoch = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default();
    let epoch = rcgen::date_time_ymd(1970, 1, 1);
    params.not_before = epoch + since_epoch;
    params.not_after = epoch + since_epoch + validity;
}

fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}
