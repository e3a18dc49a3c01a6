use super::*;

/// Parses `text` and checks that writing it back gives the same bytes.
fn round_trip(text: &str) -> Message {
    let msg = Message::from_slice(text.as_bytes()).expect("parses");
    assert_eq!(String::from_utf8(msg.to_vec()).unwrap(), text);
    msg
}

#[test]
fn keepalive_example_round_trips() {
    let msg = round_trip(
        r#"{"header":{"msg_id":"5b0a3c52-6a43-4d55-9c6a-2f0e0d1f7a10","timestamp":1700000000000},"route":{"source":"websocket","group":"resource","operation":"keepalive","resource":"node"},"content":"ping"}"#,
    );
    assert_eq!(msg.route.operation, "keepalive");
    assert_eq!(msg.content.as_string().as_deref(), Some("ping"));
}

#[test]
fn ack_example_round_trips() {
    let msg = round_trip(
        r#"{"header":{"msg_id":"9f1d","parent_msg_id":"cloud-1","timestamp":1700000000001},"route":{"source":"edgecontroller","group":"resource","operation":"response","resource":"default/pod/nginx"},"content":"OK"}"#,
    );
    assert_eq!(msg.parent_id(), Some("cloud-1"));
}

#[test]
fn every_header_key_in_kubeedge_order() {
    round_trip(
        r#"{"header":{"msg_id":"a","parent_msg_id":"b","timestamp":1,"resourceversion":"7","sync":true,"type":"t"},"route":{"source":"s","destination":"d","group":"g","operation":"o","resource":"r"},"content":{"z":1,"a":[true,null]}}"#,
    );
}

#[test]
fn always_written_keys_are_written_when_empty() {
    let msg = Message {
        header: Header::default(),
        route: Route::default(),
        content: Content::default(),
    };
    assert_eq!(
        String::from_utf8(msg.to_vec()).unwrap(),
        r#"{"header":{"msg_id":"","timestamp":0},"route":{},"content":null}"#
    );
}

#[test]
fn cloud_form_clears_sync() {
    let mut msg = Message::build("edged", "meta", "query", "default/pod", Content::null());
    msg.header.sync = true;
    assert!(
        String::from_utf8(msg.to_vec())
            .unwrap()
            .contains("\"sync\":true")
    );
    assert!(
        !String::from_utf8(msg.to_cloud_vec())
            .unwrap()
            .contains("sync")
    );
}

#[test]
fn accepts_escaped_html_and_router_alias() {
    let msg = Message::from_slice(
        br#"{"header":{"msg_id":"x","timestamp":2},"router":{"operation":"insert"},"content":"\u003cb\u003e \u0026"}"#,
    )
    .unwrap();
    assert_eq!(msg.route.operation, "insert");
    assert_eq!(msg.content.as_string().as_deref(), Some("<b> &"));
    // Written back as route, not router.
    assert!(
        String::from_utf8(msg.to_vec())
            .unwrap()
            .contains("\"route\":{")
    );
}

#[test]
fn malformed_input_is_an_error() {
    for bad in [
        &b"not json"[..],
        br#"{"header":{"msg_id":"x"}}"#,
        br#"{"route":{}}"#,
        br#"{"header":{"msg_id":1},"route":{}}"#,
        br#"{"header":{"timestamp":"soon"},"route":{}}"#,
    ] {
        assert!(
            Message::from_slice(bad).is_err(),
            "{:?} should be rejected",
            String::from_utf8_lossy(bad)
        );
    }
}

#[test]
fn new_messages_get_uuid_v4_ids_and_time() {
    let before = crate::time::now_ms();
    let msg = Message::build("a", "b", "c", "d", Content::ok());
    let id = uuid::Uuid::parse_str(&msg.header.id).unwrap();
    assert_eq!(id.get_version_num(), 4);
    assert_eq!(msg.header.id, msg.header.id.to_lowercase());
    assert!(msg.header.timestamp >= before);
}

#[test]
fn response_pairs_by_parent_id_and_copies_route() {
    let mut req = Message::build(
        "edgecontroller",
        "resource",
        "insert",
        "default/pod/nginx",
        Content::null(),
    );
    req.header.message_type = "t".into();
    let resp = req.response(Content::ok());
    assert_ne!(resp.header.id, req.header.id);
    assert_eq!(resp.header.parent_id, req.header.id);
    assert_eq!(resp.header.message_type, "t");
    assert_eq!(resp.route.source, "edgecontroller");
    assert_eq!(resp.route.group, "resource");
    assert_eq!(resp.route.resource, "default/pod/nginx");
    assert_eq!(resp.route.operation, "response");
    assert_eq!(resp.content.raw(), "\"OK\"");

    let err = req.error_reply("metamanager", "meta", "boom");
    assert_eq!(err.header.parent_id, req.header.id);
    assert_eq!(err.route.operation, "error");
    assert_eq!(err.route.source, "metamanager");
    assert_eq!(err.route.group, "meta");
    assert_eq!(err.route.resource, "default/pod/nginx");
    assert_eq!(err.content.as_string().as_deref(), Some("boom"));
}

#[test]
fn content_to_bytes_follows_kubeedge() {
    assert_eq!(Content::string("raw text").to_bytes(), b"raw text");
    let obj = Content::from_raw(r#"{ "b": 1, "a": {"d": 2, "c": 3} }"#).unwrap();
    assert_eq!(obj.to_bytes(), br#"{"a":{"c":3,"d":2},"b":1}"#);
    assert_eq!(Content::from_raw("[1, 2]").unwrap().to_bytes(), b"[1,2]");
}

#[test]
fn content_parse_accepts_json_inside_a_string() {
    #[derive(serde::Deserialize)]
    struct Pod {
        name: String,
    }
    let direct = Content::from_raw(r#"{"name":"a"}"#).unwrap();
    let wrapped = Content::string(r#"{"name":"b"}"#);
    assert_eq!(direct.parse::<Pod>().unwrap().name, "a");
    assert_eq!(wrapped.parse::<Pod>().unwrap().name, "b");
    assert!(Content::string("nope").parse::<Pod>().is_err());
    assert!(Content::from_raw("{oops").is_err());
}
