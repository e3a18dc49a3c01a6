//! CloudCore's router (`rules.kubeedge.io/v1`) end to end on the node, all four rule kinds that
//! reach an edge node, as KubeEdge's own e2e suite drives them (`tests/e2e/rule`):
//! - rest → eventbus: a REST call on the cloud publishes on the node's MQTT broker;
//! - eventbus → rest: an MQTT publish on the node reaches an HTTP endpoint through the cloud;
//! - rest → servicebus: a REST call on the cloud reaches an HTTP app on the node, and the app's
//!   body comes back to the caller (the router passes a 200 through; any other status it
//!   retries three times and then answers 500);
//! - servicebus → rest: an app on the node posts to the servicebus and gets the cloud
//!   endpoint's answer; deleting the rule closes the servicebus's port again.
//!
//! The HTTP endpoints and apps are small servers of this file on loopback (cloud and node
//! share the machine); everything between them is the real router, CloudHub and the node.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::mpsc;
use std::time::Duration;

use anyhow::{Context, Result, bail, ensure};
use wedge_tests::mqtt::MqttClient;
use wedge_tests::realcloud::wait_for;

use crate::Bed;

/// One request an HTTP server of this file received.
#[derive(Debug, Clone)]
struct Received {
    path: String,
    user: String,
    body: String,
}

/// An HTTP/1.1 server on a free loopback port answering every request with `answer(request)`
/// (status and body); what it receives is sent on the returned channel.
fn http_server(
    answer: impl Fn(&Received) -> (u16, String) + Send + 'static,
) -> Result<(u16, mpsc::Receiver<Received>)> {
    let listener = TcpListener::bind("127.0.0.1:0")?;
    let port = listener.local_addr()?.port();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { continue };
            let Ok(request) = read_request(&mut stream) else {
                continue;
            };
            let (status, body) = answer(&request);
            let _ = write!(
                stream,
                "HTTP/1.1 {status} X\r\nContent-Type: text/plain\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                body.len()
            );
            if tx.send(request).is_err() {
                return;
            }
        }
    });
    Ok((port, rx))
}

fn read_request(stream: &mut TcpStream) -> Result<Received> {
    stream.set_read_timeout(Some(Duration::from_secs(10)))?;
    let mut reader = BufReader::new(stream);
    let mut line = String::new();
    reader.read_line(&mut line)?;
    let path = line
        .split_whitespace()
        .nth(1)
        .unwrap_or_default()
        .to_owned();
    let (mut length, mut user) = (0usize, String::new());
    loop {
        let mut header = String::new();
        reader.read_line(&mut header)?;
        let header = header.trim_end();
        if header.is_empty() {
            break;
        }
        if let Some((name, value)) = header.split_once(':') {
            match name.trim().to_ascii_lowercase().as_str() {
                "content-length" => length = value.trim().parse().unwrap_or(0),
                "user" => value.trim().clone_into(&mut user),
                "transfer-encoding" => bail!("chunked requests are not read here"),
                _ => {}
            }
        }
    }
    let mut body = vec![0; length];
    reader.read_exact(&mut body)?;
    Ok(Received {
        path,
        user,
        body: String::from_utf8_lossy(&body).into_owned(),
    })
}

/// POSTs `body` to `http://{addr}{path}` with extra `headers`; the status and the body.
fn post(addr: &str, path: &str, headers: &[(&str, &str)], body: &str) -> Result<(u16, String)> {
    let mut stream = TcpStream::connect(addr).with_context(|| format!("connecting to {addr}"))?;
    stream.set_read_timeout(Some(Duration::from_secs(30)))?;
    let mut request = format!(
        "POST {path} HTTP/1.1\r\nHost: {addr}\r\nContent-Length: {}\r\nConnection: close\r\n",
        body.len()
    );
    for (name, value) in headers {
        request.push_str(&format!("{name}: {value}\r\n"));
    }
    request.push_str("\r\n");
    request.push_str(body);
    stream.write_all(request.as_bytes())?;
    let mut raw = Vec::new();
    stream.read_to_end(&mut raw)?;
    let raw = String::from_utf8_lossy(&raw).into_owned();
    let (status, body) = wedge_tests::parse_response(&raw)?;
    // The router's answers are chunked (it sets Transfer-Encoding itself).
    let chunked = raw.split_once("\r\n\r\n").is_some_and(|(head, _)| {
        head.to_ascii_lowercase()
            .contains("transfer-encoding: chunked")
    });
    Ok((status, if chunked { dechunk(&body) } else { body }))
}

fn dechunk(mut rest: &str) -> String {
    let mut out = String::new();
    while let Some((size, after)) = rest.split_once("\r\n") {
        let Ok(n) = usize::from_str_radix(size.trim(), 16) else {
            break;
        };
        if n == 0 || after.len() < n {
            break;
        }
        out.push_str(&after[..n]);
        rest = after[n..].trim_start_matches("\r\n");
    }
    out
}

fn endpoint(name: &str, kind: &str, properties: &str) -> String {
    format!(
        "apiVersion: rules.kubeedge.io/v1\nkind: RuleEndpoint\nmetadata:\n  name: {name}\n  \
         namespace: default\nspec:\n  ruleEndpointType: {kind}\n  properties: {properties}\n"
    )
}

fn rule(
    name: &str,
    source: &str,
    source_resource: &str,
    target: &str,
    target_resource: &str,
) -> String {
    format!(
        "apiVersion: rules.kubeedge.io/v1\nkind: Rule\nmetadata:\n  name: {name}\n  \
         namespace: default\nspec:\n  source: {source}\n  sourceResource: {source_resource}\n  \
         target: {target}\n  targetResource: {target_resource}\n"
    )
}

/// The check.
pub fn rules_carry_messages_through_eventbus_and_servicebus(bed: &mut Bed) -> Result<()> {
    let node = bed.node.name.clone();
    let router = format!("127.0.0.1:{}", bed.cloud.ports.router);
    let servicebus = format!("127.0.0.1:{}", bed.servicebus_port);
    // An HTTP app on the node (for rest → servicebus) and a cloud endpoint (for eventbus →
    // rest and servicebus → rest).
    let (app_port, app_calls) = http_server(|r| {
        (
            200,
            format!("Reply from server: {} [user]: {}", r.body, r.user),
        )
    })?;
    let (cloud_port, cloud_calls) = http_server(|_| (200, "Hello World".to_owned()))?;
    bed.cloud.apply(
        &[
            endpoint("rc-rest", "rest", "{}"),
            endpoint("rc-eventbus", "eventbus", "{}"),
            endpoint(
                "rc-servicebus",
                "servicebus",
                &format!("{{service_port: \"{app_port}\"}}"),
            ),
        ]
        .join("---\n"),
    )?;

    // rest → eventbus.
    bed.cloud.apply(&rule(
        "rc-rest-eventbus",
        "rc-rest",
        "{path: /to-mqtt}",
        "rc-eventbus",
        "{topic: rc-down}",
    ))?;
    wait_for(
        "the router's REST port opens (with the first rule whose source is rest)",
        Duration::from_secs(30),
        || Ok(TcpStream::connect(&router).is_ok().then_some(())),
    )?;
    let mut mqtt = MqttClient::connect(bed.node.mqtt_port, "rc-rules")?;
    mqtt.subscribe("rc-down")?;
    let mut sent = 0;
    wait_for(
        "a REST call on the cloud reaches MQTT on the node",
        Duration::from_secs(30),
        || {
            sent += 1;
            let (status, body) = post(
                &router,
                &format!("/{node}/default/to-mqtt"),
                &[],
                &format!("down-{sent}"),
            )?;
            ensure!(status == 200, "the router answered {status}: {body}");
            Ok(mqtt.expect("rc-down", Duration::from_secs(2)).ok())
        },
    )?;

    // eventbus → rest.
    bed.cloud.apply(&rule(
        "rc-eventbus-rest",
        "rc-eventbus",
        &format!("{{topic: rc-up, node_name: {node}}}"),
        "rc-rest",
        &format!("{{resource: \"http://127.0.0.1:{cloud_port}/from-mqtt\"}}"),
    ))?;
    wait_for(
        "an MQTT publish on the node reaches the cloud endpoint",
        Duration::from_secs(30),
        || {
            mqtt.publish("default/rc-up", "up-1")?;
            Ok(cloud_calls
                .recv_timeout(Duration::from_secs(2))
                .ok()
                .filter(|r| r.path == "/from-mqtt" && r.body == "up-1"))
        },
    )?;

    // rest → servicebus.
    bed.cloud.apply(&rule(
        "rc-rest-servicebus",
        "rc-rest",
        "{path: /to-app}",
        "rc-servicebus",
        "{path: /url}",
    ))?;
    let (status, body) = wait_for(
        "a REST call on the cloud reaches the app on the node",
        Duration::from_secs(30),
        || {
            let answer = post(
                &router,
                &format!("/{node}/default/to-app"),
                &[("user", "I am user")],
                "Hello World!",
            )?;
            ensure!(answer.0 == 200, "the router answered {answer:?}");
            Ok(Some(answer))
        },
    )?;
    let call = app_calls
        .recv_timeout(Duration::from_secs(1))
        .context("the app saw no call")?;
    ensure!(
        call.path == "/url" && call.body == "Hello World!" && call.user == "I am user",
        "the app got {call:?}"
    );
    ensure!(
        status == 200 && body == "Reply from server: Hello World! [user]: I am user",
        "the cloud caller got {status} {body:?}"
    );

    // servicebus → rest, then the rule's deletion closes the servicebus port again.
    let target = format!("http://127.0.0.1:{cloud_port}/from-app");
    bed.cloud.apply(&rule(
        "rc-servicebus-rest",
        "rc-servicebus",
        &format!("{{target_url: \"{target}\", node_name: {node}}}"),
        "rc-rest",
        &format!("{{resource: \"{target}\"}}"),
    ))?;
    let request = format!(r#"{{"method":"POST","targetURL":"{target}","payload":""}}"#);
    let answer = wait_for(
        "an app on the node gets the cloud endpoint's answer",
        Duration::from_secs(30),
        || {
            let (_, body) = post(
                &servicebus,
                "/",
                &[("Content-Type", "application/json")],
                &request,
            )?;
            let answer: serde_json::Value =
                serde_json::from_str(&body).with_context(|| format!("not JSON: {body:?}"))?;
            ensure!(answer["code"] == 200, "the servicebus answered {answer}");
            Ok(Some(answer))
        },
    )?;
    ensure!(
        answer["body"] == "Hello World",
        "the servicebus answered {answer}"
    );
    let seen = cloud_calls
        .recv_timeout(Duration::from_secs(1))
        .context("the cloud endpoint saw no call")?;
    ensure!(seen.path == "/from-app", "the cloud endpoint got {seen:?}");
    // What the router hands the endpoint is its own business (the request as the node sent
    // it: Go's []byte, so base64); shown, not judged.
    println!(
        "servicebus → rest: the cloud endpoint received {:?}",
        seen.body
    );
    let refused = post(
        &servicebus,
        "/",
        &[],
        r#"{"method":"GET","targetURL":"http://127.0.0.1:1/nope"}"#,
    )?;
    ensure!(
        refused.1.contains("is not allowed"),
        "a URL no rule names: {refused:?}"
    );
    bed.cloud
        .kubectl(&["delete", "rule", "rc-servicebus-rest"])?;
    wait_for(
        "the servicebus stops listening with its last rule gone",
        Duration::from_secs(30),
        || Ok(TcpStream::connect(&servicebus).is_err().then_some(())),
    )?;

    for r in ["rc-rest-eventbus", "rc-eventbus-rest", "rc-rest-servicebus"] {
        bed.cloud.kubectl(&["delete", "rule", r])?;
    }
    bed.cloud.kubectl(&[
        "delete",
        "ruleendpoint",
        "rc-rest",
        "rc-eventbus",
        "rc-servicebus",
    ])?;
    Ok(())
}
