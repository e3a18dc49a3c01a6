//! The WebSocket link: framing, keepalive, dispatch, reconnect.
