//! A real registry for the pull-secret test: Debian's `docker-registry` (the distribution
//! registry) with htpasswd authentication on 127.0.0.1 (an insecure registry to Docker by
//! default, so plain HTTP works), killed when dropped, also when the test fails.

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use bollard::auth::DockerCredentials;
use futures_util::StreamExt;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::common::WAIT;

/// A running registry and the image the test pushed to it.
pub struct Registry {
    child: Child,
    /// `127.0.0.1:<port>`.
    pub address: String,
    /// Its data, config and log.
    dir: tempfile::TempDir,
    /// Image references to untag when the test ends.
    pushed: Vec<String>,
}

/// Runs `program` with `args`, failing the test with `package` named when it is missing.
fn command(program: &str, package: &str) -> Command {
    let found = std::env::var_os("PATH")
        .map(|paths| std::env::split_paths(&paths).any(|p| p.join(program).is_file()))
        .unwrap_or(false);
    assert!(
        found,
        "this test needs `{program}` from Debian's {package} package (apt-get install {package}; \
         bash .ci/setup installs it)"
    );
    Command::new(program)
}

impl Registry {
    /// Starts a registry that lets in `user` with `password` only.
    pub async fn start(user: &str, password: &str) -> Registry {
        let dir = tempfile::tempdir().unwrap();
        let hashed = command("htpasswd", "apache2-utils")
            .args(["-Bbn", user, password])
            .output()
            .expect("htpasswd runs");
        assert!(hashed.status.success(), "htpasswd failed: {hashed:?}");
        std::fs::write(dir.path().join("htpasswd"), &hashed.stdout).unwrap();
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .map(|a| a.port())
            .expect("a free port");
        let address = format!("127.0.0.1:{port}");
        let config = format!(
            "version: 0.1\nlog:\n  level: warn\n  accesslog:\n    disabled: true\nstorage:\n  filesystem:\n    rootdirectory: {data}\nhttp:\n  addr: {address}\nauth:\n  htpasswd:\n    realm: wedge-test\n    path: {htpasswd}\n",
            data = dir.path().join("data").display(),
            htpasswd = dir.path().join("htpasswd").display(),
        );
        let config_path = dir.path().join("config.yml");
        std::fs::write(&config_path, config).unwrap();
        let log = std::fs::File::create(dir.path().join("registry.log")).unwrap();
        let child = command("docker-registry", "docker-registry")
            .arg("serve")
            .arg(&config_path)
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .expect("docker-registry starts");
        let mut registry = Registry {
            child,
            address,
            dir,
            pushed: Vec::new(),
        };
        registry.wait_ready().await;
        registry
    }

    /// Waits until the registry answers `/v2/` with 401 (it wants credentials).
    async fn wait_ready(&mut self) {
        let deadline = Instant::now() + WAIT;
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                panic!("docker-registry exited ({status}): {}", self.log());
            }
            if let Ok(mut stream) = tokio::net::TcpStream::connect(&self.address).await {
                let request = format!("GET /v2/ HTTP/1.0\r\nHost: {}\r\n\r\n", self.address);
                let mut answer = String::new();
                if stream.write_all(request.as_bytes()).await.is_ok()
                    && stream.read_to_string(&mut answer).await.is_ok()
                    && answer.split_whitespace().nth(1) == Some("401")
                {
                    return;
                }
            }
            assert!(
                Instant::now() < deadline,
                "docker-registry never answered: {}",
                self.log()
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("registry.log")).unwrap_or_default()
    }

    /// Credentials for the registry, as a pull or push sends them.
    pub fn credentials(&self, user: &str, password: &str) -> DockerCredentials {
        DockerCredentials {
            username: Some(user.to_owned()),
            password: Some(password.to_owned()),
            serveraddress: Some(self.address.clone()),
            ..DockerCredentials::default()
        }
    }

    /// Pushes the local image `source` as `<registry>/<repo>:<tag>` with `credentials`, then
    /// removes that local tag, so only a pull brings it back. Returns the reference.
    pub async fn push(
        &mut self,
        docker: &bollard::Docker,
        source: &str,
        repo: &str,
        tag: &str,
        credentials: DockerCredentials,
    ) -> String {
        use bollard::query_parameters::{PushImageOptions, RemoveImageOptions, TagImageOptions};
        let repository = format!("{}/{repo}", self.address);
        let reference = format!("{repository}:{tag}");
        docker
            .tag_image(
                source,
                Some(TagImageOptions {
                    repo: Some(repository.clone()),
                    tag: Some(tag.to_owned()),
                }),
            )
            .await
            .expect("tag the test image");
        self.pushed.push(reference.clone());
        let options = PushImageOptions {
            tag: Some(tag.to_owned()),
            ..Default::default()
        };
        let mut progress = docker.push_image(&repository, Some(options), Some(credentials));
        while let Some(step) = progress.next().await {
            if let Err(e) = step {
                panic!(
                    "push of {reference} failed: {e}; registry log: {}",
                    self.log()
                );
            }
        }
        let untag = RemoveImageOptions {
            force: false,
            noprune: true,
            ..Default::default()
        };
        docker
            .remove_image(&reference, Some(untag), None)
            .await
            .expect("remove the local tag");
        reference
    }
}

impl Drop for Registry {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        // A pull may have brought the tag back; the image itself stays (the test image's).
        for reference in &self.pushed {
            let _ = Command::new("docker")
                .args(["image", "rm", reference])
                .output();
        }
    }
}
